package reduce

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/flexlink/flexlink/dtype"
)

// PreMul sets dst[i] = src[i] × s for every element of type dt, where s is
// the one element of dt in scalar: the first step of NCCL's PreMulSum
// (ncclRedOpCreatePreMulSum), whose reduction then goes on as Sum. dst and
// src must have the same length; they may be the same slice.
//
// Semantics are NCCL's FuncPreMulSum, element by element:
//   - integers: the wrapped product (two's complement), as Prod;
//   - float32 and float64: the IEEE product in that precision;
//   - float16 and bfloat16: the exact product rounded once to the type
//     (NCCL's __hmul; the product of two such values is exact in float32);
//   - float8: the product saturated to the type (see dtype.Float32ToF8E4M3);
//     NCCL rounds it to float16 first, which gives the same bits (the
//     product of two float8 values is exact in float16 unless it overflows
//     it, and then both saturate).
//
// It returns an error, and leaves dst untouched, when dt is unknown, when
// scalar is not one element, when a length is not a multiple of the element
// size, or (wrapping errs.ErrMismatch) when the lengths differ.
func PreMul(dst, src []byte, dt dtype.DType, scalar []byte) error {
	if !dt.Valid() {
		return fmt.Errorf("reduce: premul: unknown dtype %s", dt)
	}
	if len(scalar) != dt.Size() {
		return fmt.Errorf("reduce: premul %s: scalar has %d bytes, want one %d-byte element", dt, len(scalar), dt.Size())
	}
	if err := check(dst, src, dt, dtype.Prod); err != nil {
		return fmt.Errorf("premul: %w", err)
	}
	preMul(dst, src, dt, scalar)
	return nil
}

// preMul is PreMul after the checks: one element at a time (premultiplying
// is one pass over the data before a sum, memory-bound on any path).
func preMul(dst, src []byte, dt dtype.DType, scalar []byte) {
	le := binary.LittleEndian
	switch dt {
	case dtype.Int8, dtype.Uint8: // the low 8 bits of a product do not depend on signedness
		s := scalar[0]
		for i := range dst {
			dst[i] = src[i] * s
		}
	case dtype.Int32, dtype.Uint32:
		s := le.Uint32(scalar)
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], le.Uint32(src[i:])*s)
		}
	case dtype.Int64, dtype.Uint64:
		s := le.Uint64(scalar)
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], le.Uint64(src[i:])*s)
		}
	case dtype.Float16:
		s := dtype.Float16ToFloat32(le.Uint16(scalar))
		for i := 0; i < len(dst); i += 2 {
			le.PutUint16(dst[i:], dtype.Float32ToFloat16(dtype.Float16ToFloat32(le.Uint16(src[i:]))*s))
		}
	case dtype.BFloat16:
		s := dtype.BFloat16ToFloat32(le.Uint16(scalar))
		for i := 0; i < len(dst); i += 2 {
			le.PutUint16(dst[i:], dtype.Float32ToBFloat16(dtype.BFloat16ToFloat32(le.Uint16(src[i:]))*s))
		}
	case dtype.Float32:
		s := math.Float32frombits(le.Uint32(scalar))
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], math.Float32bits(math.Float32frombits(le.Uint32(src[i:]))*s))
		}
	case dtype.Float64:
		s := math.Float64frombits(le.Uint64(scalar))
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], math.Float64bits(math.Float64frombits(le.Uint64(src[i:]))*s))
		}
	case dtype.Float8E4M3:
		s := dtype.F8E4M3ToFloat32(scalar[0])
		for i := range dst {
			dst[i] = dtype.Float32ToF8E4M3(dtype.F8E4M3ToFloat32(src[i]) * s)
		}
	case dtype.Float8E5M2:
		s := dtype.F8E5M2ToFloat32(scalar[0])
		for i := range dst {
			dst[i] = dtype.Float32ToF8E5M2(dtype.F8E5M2ToFloat32(src[i]) * s)
		}
	}
}
