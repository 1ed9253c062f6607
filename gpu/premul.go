package gpu

import (
	"fmt"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// PreMul enqueues dst[i] = src[i] × s for every element of type dt, where
// s is the one element of dt that scalar holds in device memory: the step
// NCCL's PreMulSum takes before summing (ncclRedOpCreatePreMulSum with
// ncclScalarDevice, or a host scalar the caller copied to the device). The
// kernel reads the scalar when it runs, so work earlier on the stream may
// write it; nothing synchronises with the host. Semantics are
// reduce.PreMul's, bit for bit (float16 and bfloat16: the exact product
// rounded once, as NCCL's __hmul; float8 saturating).
//
// dst and src must have the same length, a multiple of dt's size; they may
// be the same buffer. dst must be on the stream's device; src and scalar
// on it or on a peer it reaches. scalar must hold at least one element
// (the first is used). A dtype whose premul kernel the loaded PTX lacks
// (float8 below compute capability 9.0) fails with errs.ErrNotSupported.
func (s *Stream) PreMul(dst, src *Buffer, dt dtype.DType, scalar *Buffer) error {
	if !dt.Valid() {
		return fmt.Errorf("%s: premul %s: unknown dtype", s.dev, dt)
	}
	what := func() string { return fmt.Sprintf("premul %d bytes of %s", dst.n, dt) }
	if dst.n != src.n {
		return fmt.Errorf("%s: %s: dst has %d bytes, src %d: %w", s.dev, what(), dst.n, src.n, errs.ErrMismatch)
	}
	if dst.n%dt.Size() != 0 {
		return fmt.Errorf("%s: %s: not a whole number of %d-byte elements", s.dev, what(), dt.Size())
	}
	count := dst.n / dt.Size()
	if err := s.operands(what, count*dt.Size(), count, dst, src); err != nil {
		return err
	}
	if scalar.n < dt.Size() {
		return fmt.Errorf("%s: %s: scalar has %d bytes, want one %d-byte element: %w", s.dev, what(), scalar.n, dt.Size(), errs.ErrMismatch)
	}
	if !s.dev.reaches(scalar.dev) {
		return fmt.Errorf("%s: %w", what(), s.dev.errPeer("scalar", scalar.dev))
	}
	if count == 0 {
		return nil
	}
	k, maxGrid, err := s.dev.typeKernels(dt)
	if err != nil && (k == nil || k.missing == nil) {
		return err
	}
	if k.missingPreMul != nil {
		return k.missingPreMul
	}
	return s.Launch(k.premul, grid(count, dt, maxGrid), [3]uint32{reduceBlock, 1, 1},
		uint64(dst.ptr), uint64(src.ptr), uint64(count), uint64(scalar.ptr))
}
