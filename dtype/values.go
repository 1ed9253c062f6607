package dtype

import (
	"encoding/binary"
	"math"
)

// Put stores v as element i of b (little-endian) in type d: integers are
// converted with Go's truncating conversion and wrap to the type's width
// (uint64 takes values up to 2⁶⁴ as they are); floats round to nearest
// even, and the float8 types saturate (see Float32ToF8E4M3). v is rounded
// to float32 first for the float8 types; the double rounding is innocuous
// (float32 has more than twice their precision plus two bits). It is meant for tests, checks and examples,
// not for hot loops.
func Put(b []byte, i int, d DType, v float64) {
	switch d {
	case Int8:
		b[i] = byte(int8(int64(v)))
	case Uint8:
		b[i] = byte(uint8(int64(v)))
	case Int32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(int64(v))))
	case Int64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	case Float16:
		binary.LittleEndian.PutUint16(b[2*i:], Float32ToFloat16(float32(v)))
	case BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], Float32ToBFloat16(float32(v)))
	case Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case Float64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	case Uint32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int64(v)))
	case Uint64:
		u := uint64(int64(v))
		if v >= 1<<63 {
			u = uint64(v)
		}
		binary.LittleEndian.PutUint64(b[8*i:], u)
	case Float8E4M3:
		b[i] = Float32ToF8E4M3(float32(v))
	case Float8E5M2:
		b[i] = Float32ToF8E5M2(float32(v))
	}
}

// Get reads element i of b as type d and returns it as a float64.
func Get(b []byte, i int, d DType) float64 {
	switch d {
	case Int8:
		return float64(int8(b[i]))
	case Uint8:
		return float64(b[i])
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	case Float16:
		return float64(Float16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
	case BFloat16:
		return float64(BFloat16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b[4*i:]))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b[8*i:]))
	case Float8E4M3:
		return float64(F8E4M3ToFloat32(b[i]))
	case Float8E5M2:
		return float64(F8E5M2ToFloat32(b[i]))
	}
	return math.NaN()
}

// Round returns v as type d would store it (Put then Get).
func Round(v float64, d DType) float64 {
	var b [8]byte
	Put(b[:], 0, d, v)
	return Get(b[:], 0, d)
}

// Tolerance is the relative error flexlink's checks allow for a reduced
// value of type d whose inputs are exact: zero for integers, a few units in
// the last place for floats (reductions round at every step). The float8
// types keep 3 (E4M3) or 2 (E5M2) mantissa bits: each rounding of a chain
// (a sum over ranks, then avg's division) may move the result by up to
// 1/16 or 1/8 of itself, so their tolerance allows about four such steps
// (2+7+1 over three ranks in E5M2 sums to 8, not 10: 9 is a tie).
func Tolerance(d DType) float64 {
	switch d {
	case Float8E4M3:
		return 0.25
	case Float8E5M2:
		return 0.5
	case Float16:
		return 1e-2
	case BFloat16:
		return 4e-2
	case Float32:
		return 1e-5
	case Float64:
		return 1e-12
	}
	return 0
}

// Fold is the reference reduction by op of one element of n ranks, v(r)
// being rank r's, in float64 and in rank order: avg divides the sum by n,
// truncating toward zero for the integer types as C's division does. It
// is meant for tests, checks and examples, beside Put and Get.
func Fold(op Op, d DType, n int, v func(r int) float64) float64 {
	acc := v(0)
	for r := 1; r < n; r++ {
		x := v(r)
		switch op {
		case Sum, Avg:
			acc += x
		case Prod:
			acc *= x
		case Min:
			acc = math.Min(acc, x)
		case Max:
			acc = math.Max(acc, x)
		}
	}
	if op == Avg {
		acc /= float64(n)
		if !d.IsFloat() {
			acc = math.Trunc(acc)
		}
	}
	return acc
}
