package collectives_test

// Element encoding and the serial reference, written independently of the
// reduce package: the reference reduces in float64 (floats) or in exact
// modular integer arithmetic (integers), one element at a time.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/flexlink/flexlink/dtype"
)

// f16Decode converts IEEE half bits to float64 (exact).
func f16Decode(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 31:
		if frac == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

// f16Encode converts v to half bits, rounding to nearest even. Test inputs
// are exactly representable, so the rounding never matters for them.
func f16Encode(v float64) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	if v == 0 {
		return sign
	}
	if v >= 65520 {
		return sign | 0x7c00
	}
	exp := math.Floor(math.Log2(v))
	if exp < -14 {
		exp = -14 // subnormal scale
	}
	m := v / math.Pow(2, exp-10) // significand in units of the last place
	r := math.RoundToEven(m)
	bits := int(r)
	e := int(exp) + 15
	if bits >= 2048 { // rounded up to the next binade
		bits >>= 1
		e++
	}
	if bits < 1024 { // subnormal
		return sign | uint16(bits)
	}
	return sign | uint16(e)<<10 | uint16(bits-1024)
}

// f8Decode converts float8 bits (E4M3, or E5M2 when e5m2) to float64.
func f8Decode(b byte, e5m2 bool) float64 {
	man, bias := 3, 7
	if e5m2 {
		man, bias = 2, 15
	}
	exp, frac := int(b&0x7f)>>man, float64(int(b)&(1<<man-1))
	sign := 1.0
	if b&0x80 != 0 {
		sign = -1
	}
	switch {
	case !e5m2 && b&0x7f == 0x7f, e5m2 && b&0x7f > 0x7c:
		return math.NaN()
	case e5m2 && b&0x7f == 0x7c:
		return sign * math.Inf(1)
	case exp == 0:
		return sign * math.Ldexp(frac, 1-bias-man)
	}
	return sign * math.Ldexp(1+frac/float64(int(1)<<man), exp-bias)
}

func bf16Decode(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// bf16Encode truncates float32 bits; test inputs are exact in bfloat16.
func bf16Encode(v float64) uint16 { return uint16(math.Float32bits(float32(v)) >> 16) }

// getF reads element i of a float buffer as float64.
func getF(b []byte, dt dtype.DType, i int) float64 {
	switch dt {
	case dtype.Float16:
		return f16Decode(binary.LittleEndian.Uint16(b[2*i:]))
	case dtype.BFloat16:
		return bf16Decode(binary.LittleEndian.Uint16(b[2*i:]))
	case dtype.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case dtype.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	case dtype.Float8E4M3, dtype.Float8E5M2:
		return f8Decode(b[i], dt == dtype.Float8E5M2)
	}
	panic("getF: " + dt.String())
}

func setF(b []byte, dt dtype.DType, i int, v float64) {
	switch dt {
	case dtype.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], f16Encode(v))
	case dtype.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], bf16Encode(v))
	case dtype.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case dtype.Float64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	case dtype.Float8E4M3, dtype.Float8E5M2:
		dtype.Put(b, i, dt, v) // the reference reads the stored value back with f8Decode
	default:
		panic("setF: " + dt.String())
	}
}

// getI reads element i of an integer buffer, sign- or zero-extended.
func getI(b []byte, dt dtype.DType, i int) int64 {
	switch dt {
	case dtype.Int8:
		return int64(int8(b[i]))
	case dtype.Uint8:
		return int64(b[i])
	case dtype.Int32:
		return int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case dtype.Int64, dtype.Uint64: // uint64: the bits (wrapped sums and products alike)
		return int64(binary.LittleEndian.Uint64(b[8*i:]))
	case dtype.Uint32:
		return int64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	panic("getI: " + dt.String())
}

// wrapI truncates v to dt's width (two's complement), as the result is stored.
func wrapI(dt dtype.DType, v int64) int64 {
	switch dt {
	case dtype.Int8:
		return int64(int8(v))
	case dtype.Uint8:
		return int64(uint8(v))
	case dtype.Int32:
		return int64(int32(v))
	case dtype.Uint32:
		return int64(uint32(v))
	}
	return v
}

// fill writes count seeded random elements. Floats are multiples of 1/64
// with magnitude in [0.75, 1.25] (positive for prod), exact in every float
// type, so products of up to 8 ranks stay finite and normal; integers are
// uniform over the whole type, so sums and products wrap.
func fill(b []byte, dt dtype.DType, op dtype.Op, count int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xc011ec7))
	for i := range count {
		if dt.IsFloat() {
			v := float64(48+rng.IntN(33)) / 64
			if op != dtype.Prod && rng.IntN(2) == 0 {
				v = -v
			}
			setF(b, dt, i, v)
			continue
		}
		u := rng.Uint64()
		for j := range dt.Size() {
			b[i*dt.Size()+j] = byte(u >> (8 * j))
		}
	}
}

// unitRoundoff is half the distance from 1 to the next value of dt.
func unitRoundoff(dt dtype.DType) float64 {
	switch dt {
	case dtype.Float16:
		return math.Ldexp(1, -11)
	case dtype.BFloat16:
		return math.Ldexp(1, -8)
	case dtype.Float32:
		return math.Ldexp(1, -24)
	case dtype.Float8E4M3:
		return math.Ldexp(1, -4)
	case dtype.Float8E5M2:
		return math.Ldexp(1, -3)
	}
	return math.Ldexp(1, -53)
}

// checkReduced compares element i of got with the reduction over inputs
// (one buffer per rank, element j of each at offset in elements).
//
// Tolerances: integers and min/max are exact (the result is one of the
// inputs, or the modular sum/product). Float sums (and averages) of n
// contributions are rounded at most n times (once per reduction step, plus
// the division for avg), each time by at most the unit roundoff u of the
// result, whose magnitude never exceeds S = sum |x|; so |got - ref| <= (n+1)·u·S.
// Products are bounded relatively: (n+1)·u·|ref|. float16 and bfloat16 are
// rounded back to their own precision after every step, which u accounts
// for.
func checkReduced(got []byte, i int, inputs [][]byte, j int, dt dtype.DType, op dtype.Op) error {
	n := len(inputs)
	if !dt.IsFloat() {
		var want int64
		for r, in := range inputs {
			x := getI(in, dt, j)
			switch {
			case r == 0:
				want = x
			case op == dtype.Sum || op == dtype.Avg:
				want += x
			case op == dtype.Prod:
				want *= x
			case op == dtype.Min && dt == dtype.Uint64:
				want = int64(min(uint64(want), uint64(x)))
			case op == dtype.Max && dt == dtype.Uint64:
				want = int64(max(uint64(want), uint64(x)))
			case op == dtype.Min:
				want = min(want, x)
			case op == dtype.Max:
				want = max(want, x)
			}
			want = wrapI(dt, want)
		}
		switch {
		case op == dtype.Avg && dt == dtype.Uint64:
			want = int64(uint64(want) / uint64(n))
		case op == dtype.Avg:
			want = wrapI(dt, want/int64(n)) // the wrapped sum, divided with truncation
		}
		if g := getI(got, dt, i); g != want {
			return fmt.Errorf("element %d: got %d, want %d", i, g, want)
		}
		return nil
	}
	var want, abs float64
	for r, in := range inputs {
		x := getF(in, dt, j)
		abs += math.Abs(x)
		switch {
		case r == 0:
			want = x
		case op == dtype.Sum || op == dtype.Avg:
			want += x
		case op == dtype.Prod:
			want *= x
		case op == dtype.Min:
			want = math.Min(want, x)
		case op == dtype.Max:
			want = math.Max(want, x)
		}
	}
	tol := 0.0
	u := unitRoundoff(dt)
	switch op {
	case dtype.Sum:
		tol = float64(n+1) * u * abs
	case dtype.Avg:
		want /= float64(n)
		tol = float64(n+1) * u * abs / float64(n)
	case dtype.Prod:
		tol = float64(n+1) * u * math.Abs(want)
	}
	if g := getF(got, dt, i); math.IsNaN(g) || math.Abs(g-want) > tol {
		return fmt.Errorf("element %d: got %v, want %v ± %v", i, g, want, tol)
	}
	return nil
}
