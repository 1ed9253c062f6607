package gpu

import (
	"fmt"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// The reduction kernels (kernels/reduce.cu) and their launchers. Semantics
// are those of package reduce, bit for bit: integers wrap, float16 and
// bfloat16 go through float32 and round to nearest even, float8 through
// float32 with the saturating rounding, float min/max propagate NaN and
// order -0 below +0, Avg is Sum then a division by n.
//
// The kernels of the first eight dtypes (int8 to float64) must be in the
// PTX: a module without them fails to load. Those of uint32, uint64 and
// float8, and the premul kernels, came later: where the PTX lacks them (a
// FLEXLINK_GPU_PTX file built before them, or float8 in the compute_80
// build, which has none: NCCL too serves float8 from sm_90 on) a call that
// needs one fails with an error wrapping errs.ErrNotSupported that names
// the kernel, and the rest work.

const (
	reduceBlock  = 512 // threads per block (the kernels' __launch_bounds__)
	blocksPerSM  = 4   // 2048 resident threads per SM on sm_80/sm_90: one full wave
	vectorBytes  = 16  // the kernels' vector width
	numReduceOps = 4   // sum, prod, min, max
	kernelPrefix = "flexlink_"
	maxCount     = 1 << 60 // elements; keeps count × size in range
)

// kernelType is the kernels' suffix for dt.
func kernelType(dt dtype.DType) string {
	switch dt {
	case dtype.Int8:
		return "i8"
	case dtype.Uint8:
		return "u8"
	case dtype.Int32:
		return "i32"
	case dtype.Int64:
		return "i64"
	case dtype.Float16:
		return "f16"
	case dtype.BFloat16:
		return "bf16"
	case dtype.Float32:
		return "f32"
	case dtype.Float64:
		return "f64"
	case dtype.Uint32:
		return "u32"
	case dtype.Uint64:
		return "u64"
	case dtype.Float8E4M3:
		return "f8e4m3"
	case dtype.Float8E5M2:
		return "f8e5m2"
	}
	return ""
}

// numTypes bounds the dtype codes (the kernel tables' length).
var numTypes = func() int {
	n := 0
	for _, dt := range dtype.All() {
		n = max(n, int(dt)+1)
	}
	return n
}()

// kernelRequired reports whether dt's kernels must be in any PTX flexlink
// loads (the eight dtypes of the first kernels).
func kernelRequired(dt dtype.DType) bool { return dt <= dtype.Float64 }

// reduceOps are the ops with a kernel of their own, in kernelSet.reduce order;
// Avg runs as Sum.
func ReduceOps() [numReduceOps]dtype.Op {
	return [numReduceOps]dtype.Op{dtype.Sum, dtype.Prod, dtype.Min, dtype.Max}
}

// opIndex is op's place in reduceOps (Avg takes Sum's).
func opIndex(op dtype.Op) int {
	switch op {
	case dtype.Prod:
		return 1
	case dtype.Min:
		return 2
	case dtype.Max:
		return 3
	}
	return 0
}

// ReduceKernelName is the kernel that computes op on dt ("flexlink_reduce_sum_f32");
// Avg maps to Sum's. ScaleKernelName is Avg's final division.
func ReduceKernelName(dt dtype.DType, op dtype.Op) string {
	if op == dtype.Avg {
		op = dtype.Sum
	}
	return kernelPrefix + "reduce_" + op.String() + "_" + kernelType(dt)
}

// CopyKernelName is the SMs' byte copy (Stream.Copy); Copy2KernelName
// copies into two places at once (Stream.Copy2).
const (
	CopyKernelName  = kernelPrefix + "copy"
	Copy2KernelName = kernelPrefix + "copy2"
)

// ScaleKernelName is the kernel that divides dt elements by n.
func ScaleKernelName(dt dtype.DType) string { return kernelPrefix + "scale_" + kernelType(dt) }

// PreMulKernelName is the kernel that multiplies dt elements by a scalar
// in device memory (Stream.PreMul).
func PreMulKernelName(dt dtype.DType) string { return kernelPrefix + "premul_" + kernelType(dt) }

// missingKernels is the error of a call whose kernels the loaded code
// lacks (err: the lookup's, or nil for float8 below compute capability 9.0).
func missingKernels(dv *Device, dt dtype.DType, what string, err error) error {
	if dt.IsFloat8() && dv.info.major < 9 {
		return fmt.Errorf("%s: %s %s needs compute capability 9.0 or later (as in NCCL), have %d.%d: %w",
			dv, dt, what, dv.info.major, dv.info.minor, errs.ErrNotSupported)
	}
	return fmt.Errorf("%s: %s %s: the loaded code lacks the kernel (it predates it: rebuild gpu/kernels, or point FLEXLINK_GPU_PTX at a newer file): %v: %w",
		dv, dt, what, err, errs.ErrNotSupported)
}

// grid returns the launch size for count elements of dt: one thread per
// 16-byte vector, at most maxGrid blocks (one full wave: the kernels stride).
func grid(count int, dt dtype.DType, maxGrid uint32) [3]uint32 {
	threads := (count*dt.Size() + vectorBytes - 1) / vectorBytes
	blocks := uint32(min((threads+reduceBlock-1)/reduceBlock, int(maxGrid)))
	return [3]uint32{max(blocks, 1), 1, 1}
}

// Reduce enqueues dst[i] = a[i] op b[i] for the first count elements of type
// dt. dst must be on the stream's device; a and b may be on it, on a peer
// whose access it enabled (EnablePeerAccess), or be dst itself. Each buffer
// must hold at least count elements. Avg reduces as Sum (call Finish once
// all contributions are in). Buffers 16-byte aligned (as allocations are)
// take the vector path; others work, more slowly.
func (s *Stream) Reduce(dst, a, b *Buffer, count int, dt dtype.DType, op dtype.Op) error {
	what := func() string { return fmt.Sprintf("reduce %d %s %s", count, dt, op) }
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("%s: %s: unknown dtype or op", s.dev, what())
	}
	if err := s.operands(what, count*dt.Size(), count, dst, a, b); err != nil || count == 0 {
		return err
	}
	k, maxGrid, err := s.dev.typeKernels(dt)
	if err != nil {
		return err
	}
	return s.Launch(k.reduce[opIndex(op)], grid(count, dt, maxGrid), [3]uint32{reduceBlock, 1, 1},
		uint64(dst.ptr), uint64(a.ptr), uint64(b.ptr), uint64(count))
}

// Scale enqueues dst[i] = src[i] / n for the first count elements of type
// dt: integers truncate toward zero, float16 and bfloat16 divide in float32
// and round to nearest even. src may be dst, or on a reachable peer.
func (s *Stream) Scale(dst, src *Buffer, count int, dt dtype.DType, n int) error {
	what := func() string { return fmt.Sprintf("scale %d %s by 1/%d", count, dt, n) }
	if !dt.Valid() {
		return fmt.Errorf("%s: %s: unknown dtype", s.dev, what())
	}
	if n <= 0 {
		return fmt.Errorf("%s: %s: divisor must be positive", s.dev, what())
	}
	if err := s.operands(what, count*dt.Size(), count, dst, src); err != nil || count == 0 {
		return err
	}
	k, maxGrid, err := s.dev.typeKernels(dt)
	if err != nil {
		return err
	}
	return s.Launch(k.scale, grid(count, dt, maxGrid), [3]uint32{reduceBlock, 1, 1},
		uint64(dst.ptr), uint64(src.ptr), uint64(count), uint64(n))
}

// Copy enqueues dst = src (same length) as a kernel on this stream's SMs,
// where CopyDtoD uses a copy engine. Either buffer may be on a peer whose
// memory this device reaches (an IPC mapping or EnablePeerAccess): the
// kernel then stores into (or loads from) the peer over NVLink, which on
// 2×H200 moved more bytes per second than the copy engines writing into
// another process's memory.
func (s *Stream) Copy(dst, src *Buffer) error {
	if dst.n != src.n {
		return fmt.Errorf("%s: copy kernel: dst has %d bytes, src %d: %w", s.dev, dst.n, src.n, errs.ErrMismatch)
	}
	for _, b := range []*Buffer{dst, src} {
		if !s.dev.reaches(b.dev) {
			return fmt.Errorf("copy kernel: %w", s.dev.errPeer("buffer", b.dev))
		}
	}
	if dst.n == 0 {
		return nil
	}
	k, maxGrid, err := s.dev.commonKernels()
	if err != nil {
		return err
	}
	return s.Launch(k.copy, grid(dst.n, dtype.Uint8, maxGrid), [3]uint32{reduceBlock, 1, 1},
		uint64(dst.ptr), uint64(src.ptr), uint64(dst.n))
}

// localCopyMax is the largest copy CopyLocal makes with a kernel.
const localCopyMax = 1 << 20

// CopyLocal enqueues dst = src (same length, both on this stream's
// device) the way that costs the caller least: up to 1 MiB a copy kernel
// (Copy), whose launch takes the host less time than a copy-engine copy
// (on an H200 ~3.4 against ~4.7 µs per call, and 0.66 against 0.79 µs a
// replayed graph node: scripts/graph_node_probe.cu), above that the copy
// engine (CopyDtoD), which leaves the SMs to other work. Nothing when
// they are the same memory.
func (s *Stream) CopyLocal(dst, src *Buffer) error {
	if dst.n != src.n {
		return fmt.Errorf("%s: copy: dst has %d bytes, src %d: %w", s.dev, dst.n, src.n, errs.ErrMismatch)
	}
	if dst.n == 0 || dst.dev == src.dev && dst.ptr == src.ptr {
		return nil
	}
	if dst.n > localCopyMax || dst.dev != s.dev || src.dev != s.dev {
		return s.CopyDtoD(dst, src)
	}
	return s.Copy(dst, src)
}

// Copy2 enqueues d1 = d2 = src (all the same length) as one kernel that
// reads src once; any of them may be on a reachable peer (Copy).
func (s *Stream) Copy2(d1, d2, src *Buffer) error {
	if d1.n != src.n || d2.n != src.n {
		return fmt.Errorf("%s: copy2 kernel: %d and %d bytes from %d: %w", s.dev, d1.n, d2.n, src.n, errs.ErrMismatch)
	}
	for _, b := range []*Buffer{d1, d2, src} {
		if !s.dev.reaches(b.dev) {
			return fmt.Errorf("copy2 kernel: %w", s.dev.errPeer("buffer", b.dev))
		}
	}
	if src.n == 0 {
		return nil
	}
	k, maxGrid, err := s.dev.commonKernels()
	if err != nil {
		return err
	}
	return s.Launch(k.copy2, grid(src.n, dtype.Uint8, maxGrid), [3]uint32{reduceBlock, 1, 1},
		uint64(d1.ptr), uint64(d2.ptr), uint64(src.ptr), uint64(src.n))
}

// Finish applies op's last step to count fully reduced elements in dst, n
// contributions: Avg divides by n (see Scale); other ops do nothing. n must
// be positive.
func (s *Stream) Finish(dst *Buffer, count int, dt dtype.DType, op dtype.Op, n int) error {
	if !op.Valid() {
		return fmt.Errorf("%s: finish %s: unknown op", s.dev, op)
	}
	if n <= 0 {
		return fmt.Errorf("%s: finish %s: %d contributions, want at least 1", s.dev, op, n)
	}
	if op != dtype.Avg || n == 1 {
		return nil
	}
	return s.Scale(dst, dst, count, dt, n)
}

// operands checks a kernel's buffers: the first (the destination) on the
// stream's device, the others reachable from it, each at least bytes long.
// what names the call in an error only: a kernel call formats its name
// then, not on every call (a fmt.Sprintf per collective, issue 29).
func (s *Stream) operands(what func() string, bytes, count int, bufs ...*Buffer) error {
	if count < 0 || count > maxCount {
		return fmt.Errorf("%s: %s: bad count", s.dev, what())
	}
	names := []string{"dst", "a", "b"}
	if len(bufs) == 2 {
		names[1] = "src"
	}
	for i, b := range bufs {
		if b.n < bytes {
			return fmt.Errorf("%s: %s: %s has %d bytes, need %d: %w", s.dev, what(), names[i], b.n, bytes, errs.ErrMismatch)
		}
		if i == 0 && b.dev != s.dev {
			return fmt.Errorf("%s: %s: dst is on %s, not the stream's device", s.dev, what(), b.dev)
		}
		if !s.dev.reaches(b.dev) {
			return fmt.Errorf("%s: %w", what(), s.dev.errPeer(names[i], b.dev))
		}
	}
	return nil
}
