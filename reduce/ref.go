package reduce

import (
	"encoding/binary"
	"math"

	"github.com/flexlink/flexlink/dtype"
)

// The scalar operators. Every path (Ref, the Go loops, the assembly) must
// agree with these.

type integer interface {
	int8 | uint8 | int32 | int64 | uint32 | uint64
}

type float interface{ float32 | float64 }

// opInt applies op to two integers; Go's integer arithmetic wraps.
func opInt[T integer](a, b T, op dtype.Op) T {
	switch op {
	case dtype.Prod:
		return a * b
	case dtype.Min:
		return min(a, b)
	case dtype.Max:
		return max(a, b)
	}
	return a + b // Sum, Avg
}

// opFloat applies op to two floats.
func opFloat[T float](a, b T, op dtype.Op) T {
	switch op {
	case dtype.Prod:
		return a * b
	case dtype.Min:
		return fmin(a, b)
	case dtype.Max:
		return fmax(a, b)
	}
	return a + b // Sum, Avg
}

// fmin is the package's float minimum: NaN if either input is NaN (the NaN
// a+b gives), -0 below +0, otherwise the smaller input.
func fmin[T float](a, b T) T {
	switch {
	case a != a || b != b:
		return a + b
	case a < b:
		return a
	case b < a:
		return b
	case math.Signbit(float64(a)): // equal, so both zero or the same value
		return a
	}
	return b
}

// fmax is fmin's mirror: NaN if either is NaN, +0 above -0.
func fmax[T float](a, b T) T {
	switch {
	case a != a || b != b:
		return a + b
	case a > b:
		return a
	case b > a:
		return b
	case math.Signbit(float64(a)):
		return b
	}
	return a
}

// opHalf applies op to two float16 or bfloat16 values through float32.
func opHalf(a, b uint16, op dtype.Op, toF32 func(uint16) float32, fromF32 func(float32) uint16) uint16 {
	return fromF32(opFloat(toF32(a), toF32(b), op))
}

// opF8 applies op to two float8 values: widened to float32 (exact), combined
// in float32, rounded back with the saturating conversion. Sums and
// products of two float8 values are exact in float32 or (E5M2 sums) rounded
// there with innocuous double rounding, so the result is the correctly
// rounded one, saturated: what NCCL computes through float16.
func opF8(a, b uint8, op dtype.Op, toF32 func(uint8) float32, fromF32 func(float32) uint8) uint8 {
	return fromF32(opFloat(toF32(a), toF32(b), op))
}

// refLoop is the plain reference: decode one element of each buffer,
// combine, encode. The lengths have been checked.
func refLoop(dst, src []byte, dt dtype.DType, op dtype.Op) {
	le := binary.NativeEndian
	switch dt {
	case dtype.Int8:
		for i := range dst {
			dst[i] = byte(opInt(int8(dst[i]), int8(src[i]), op))
		}
	case dtype.Uint8:
		for i := range dst {
			dst[i] = opInt(dst[i], src[i], op)
		}
	case dtype.Int32:
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], uint32(opInt(int32(le.Uint32(dst[i:])), int32(le.Uint32(src[i:])), op)))
		}
	case dtype.Int64:
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], uint64(opInt(int64(le.Uint64(dst[i:])), int64(le.Uint64(src[i:])), op)))
		}
	case dtype.Uint32:
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], opInt(le.Uint32(dst[i:]), le.Uint32(src[i:]), op))
		}
	case dtype.Uint64:
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], opInt(le.Uint64(dst[i:]), le.Uint64(src[i:]), op))
		}
	case dtype.Float8E4M3:
		for i := range dst {
			dst[i] = opF8(dst[i], src[i], op, dtype.F8E4M3ToFloat32, dtype.Float32ToF8E4M3)
		}
	case dtype.Float8E5M2:
		for i := range dst {
			dst[i] = opF8(dst[i], src[i], op, dtype.F8E5M2ToFloat32, dtype.Float32ToF8E5M2)
		}
	case dtype.Float16:
		for i := 0; i < len(dst); i += 2 {
			le.PutUint16(dst[i:], opHalf(le.Uint16(dst[i:]), le.Uint16(src[i:]), op, dtype.Float16ToFloat32, dtype.Float32ToFloat16))
		}
	case dtype.BFloat16:
		for i := 0; i < len(dst); i += 2 {
			le.PutUint16(dst[i:], opHalf(le.Uint16(dst[i:]), le.Uint16(src[i:]), op, dtype.BFloat16ToFloat32, dtype.Float32ToBFloat16))
		}
	case dtype.Float32:
		for i := 0; i < len(dst); i += 4 {
			r := opFloat(math.Float32frombits(le.Uint32(dst[i:])), math.Float32frombits(le.Uint32(src[i:])), op)
			le.PutUint32(dst[i:], math.Float32bits(r))
		}
	case dtype.Float64:
		for i := 0; i < len(dst); i += 8 {
			r := opFloat(math.Float64frombits(le.Uint64(dst[i:])), math.Float64frombits(le.Uint64(src[i:])), op)
			le.PutUint64(dst[i:], math.Float64bits(r))
		}
	}
}

// finishAvg divides every element by n (n ≥ 2).
func finishAvg(dst []byte, dt dtype.DType, n int) {
	le := binary.NativeEndian
	switch dt {
	case dtype.Int8:
		for i := range dst {
			dst[i] = byte(int8(int64(int8(dst[i])) / int64(n)))
		}
	case dtype.Uint8:
		for i := range dst {
			dst[i] = byte(uint64(dst[i]) / uint64(n))
		}
	case dtype.Int32:
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], uint32(int64(int32(le.Uint32(dst[i:])))/int64(n)))
		}
	case dtype.Int64:
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], uint64(int64(le.Uint64(dst[i:]))/int64(n)))
		}
	case dtype.Uint32:
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], uint32(uint64(le.Uint32(dst[i:]))/uint64(n)))
		}
	case dtype.Uint64:
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], le.Uint64(dst[i:])/uint64(n))
		}
	case dtype.Float8E4M3:
		d := float32(n)
		for i := range dst {
			dst[i] = dtype.Float32ToF8E4M3(dtype.F8E4M3ToFloat32(dst[i]) / d)
		}
	case dtype.Float8E5M2:
		d := float32(n)
		for i := range dst {
			dst[i] = dtype.Float32ToF8E5M2(dtype.F8E5M2ToFloat32(dst[i]) / d)
		}
	case dtype.Float16:
		d := float32(n)
		for i := 0; i < len(dst); i += 2 {
			le.PutUint16(dst[i:], dtype.Float32ToFloat16(dtype.Float16ToFloat32(le.Uint16(dst[i:]))/d))
		}
	case dtype.BFloat16:
		d := float32(n)
		for i := 0; i < len(dst); i += 2 {
			le.PutUint16(dst[i:], dtype.Float32ToBFloat16(dtype.BFloat16ToFloat32(le.Uint16(dst[i:]))/d))
		}
	case dtype.Float32:
		d := float32(n)
		for i := 0; i < len(dst); i += 4 {
			le.PutUint32(dst[i:], math.Float32bits(math.Float32frombits(le.Uint32(dst[i:]))/d))
		}
	case dtype.Float64:
		d := float64(n)
		for i := 0; i < len(dst); i += 8 {
			le.PutUint64(dst[i:], math.Float64bits(math.Float64frombits(le.Uint64(dst[i:]))/d))
		}
	}
}
