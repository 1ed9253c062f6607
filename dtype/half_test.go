package dtype

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// Independent references: decode the bit fields with math.Ldexp in float64,
// and round by searching the table of every finite value of the format.

// halfFormat describes a 16-bit float format for the reference code.
type halfFormat struct {
	name    string
	manBits int    // stored mantissa bits
	bias    int    // exponent bias
	maxFin  uint16 // bits of the largest finite value
	toF32   func(uint16) float32
	fromF32 func(float32) uint16
}

func f16Format() halfFormat {
	return halfFormat{"float16", 10, 15, 0x7bff, Float16ToFloat32, Float32ToFloat16}
}

func bf16Format() halfFormat {
	return halfFormat{"bfloat16", 7, 127, 0x7f7f, BFloat16ToFloat32, Float32ToBFloat16}
}

func (f halfFormat) expMask() uint16  { return 0x7fff &^ (1<<f.manBits - 1) }
func (f halfFormat) quietBit() uint16 { return 1 << (f.manBits - 1) }
func (f halfFormat) isNaN(h uint16) bool {
	return h&f.expMask() == f.expMask() && h&(1<<f.manBits-1) != 0
}

// decode returns the value of h from its fields (NaN is reported as NaN).
func (f halfFormat) decode(h uint16) float64 {
	neg := h&0x8000 != 0
	exp := int(h&0x7fff) >> f.manBits
	man := int(h) & (1<<f.manBits - 1)
	var v float64
	switch {
	case h&f.expMask() == f.expMask():
		if man != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	case exp == 0:
		v = math.Ldexp(float64(man), 1-f.bias-f.manBits)
	default:
		v = math.Ldexp(float64(man|1<<f.manBits), exp-f.bias-f.manBits)
	}
	if neg {
		v = -v
	}
	return v
}

// round rounds v to the nearest finite value of the format, ties to the
// even bit pattern, overflowing to Inf past the half-way point above the
// largest finite value (as if the exponent range went on).
func (f halfFormat) round(v float64) uint16 {
	if math.IsNaN(v) {
		panic("round NaN")
	}
	var sign uint16
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	if math.IsInf(v, 1) {
		return sign | f.expMask()
	}
	// value(k) for k = 0..maxFin+1; maxFin+1 is Inf, standing for 2^(maxExp+1).
	value := func(k int) float64 {
		if k == int(f.maxFin)+1 {
			return math.Ldexp(1, int(f.maxFin>>f.manBits)-f.bias+1)
		}
		return f.decode(uint16(k))
	}
	// Positive finite bit patterns are ordered like their values.
	k := sort.Search(int(f.maxFin)+2, func(k int) bool { return value(k) > v }) - 1
	if k == int(f.maxFin)+1 {
		return sign | f.expMask()
	}
	lo, hi := value(k), value(k+1)
	return sign | uint16(nearestEven(v, lo, hi, k))
}

func TestHalfToFloat32Exhaustive(t *testing.T) {
	for _, f := range []halfFormat{f16Format(), bf16Format()} {
		for i := range 1 << 16 {
			h := uint16(i)
			got := f.toF32(h)
			want := f.decode(h)
			if f.isNaN(h) {
				gb := math.Float32bits(got)
				wantBits := uint32(h&0x8000)<<16 | 0x7f800000 | uint32(h&(1<<f.manBits-1))<<(23-f.manBits)
				if f.manBits == 10 {
					wantBits |= 0x400000 // float16 widening quiets, like VCVTPH2PS
				}
				if gb != wantBits {
					t.Fatalf("%s %#04x: got %#08x, want NaN %#08x", f.name, h, gb, wantBits)
				}
				continue
			}
			if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
				t.Fatalf("%s %#04x: got %v, want %v", f.name, h, got, want)
			}
		}
	}
}

func TestHalfRoundTripExhaustive(t *testing.T) {
	for _, f := range []halfFormat{f16Format(), bf16Format()} {
		for i := range 1 << 16 {
			h := uint16(i)
			want := h
			if f.isNaN(h) {
				want |= f.quietBit()
			}
			if got := f.fromF32(f.toF32(h)); got != want {
				t.Fatalf("%s %#04x: round trip gives %#04x, want %#04x", f.name, h, got, want)
			}
		}
	}
}

// float32 inputs that probe every rounding boundary of the format: each
// value, the midpoint to the next, and the float32 neighbours of both.
func boundaryInputs(f halfFormat) []float32 {
	var in []float32
	for k := 0; k <= int(f.maxFin); k++ {
		lo := f.decode(uint16(k))
		var hi float64
		if k == int(f.maxFin) {
			hi = math.Ldexp(1, int(f.maxFin>>f.manBits)-f.bias+1)
		} else {
			hi = f.decode(uint16(k + 1))
		}
		for _, v := range []float32{float32(lo), float32((lo + hi) / 2)} { // both exact in float32
			in = append(in, v, math.Nextafter32(v, 0), math.Nextafter32(v, float32(math.Inf(1))))
		}
	}
	return in
}

func TestFloat32ToHalfRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range []halfFormat{f16Format(), bf16Format()} {
		in := boundaryInputs(f)
		for range 1 << 18 {
			in = append(in, math.Float32frombits(rng.Uint32()))
		}
		in = append(in, 0, float32(math.Inf(1)), math.MaxFloat32, math.SmallestNonzeroFloat32,
			1e-30, 65519.996, 65520, 65536, 1e10)
		// NaN: stays NaN, quiet, keeps sign and the top of the payload.
		nan := func(xb uint32) uint16 {
			return uint16(xb>>16)&0x8000 | f.expMask() | f.quietBit() | uint16(xb>>(23-f.manBits))&(1<<f.manBits-1)
		}
		checkFromF32(t, f.name, in, f.fromF32, f.round, nan)
	}
}

// nearestEven rounds v, between the values lo of bits k and hi of bits
// k+1, to the nearer one's bits, ties to the even one.
func nearestEven(v, lo, hi float64, k int) int {
	switch {
	case v-lo < hi-v:
		return k
	case v-lo > hi-v:
		return k + 1
	case k%2 == 0:
		return k
	}
	return k + 1
}

// checkFromF32 checks conv (named name) on every input and its negation:
// a NaN must give nan of its bits, any other value round of it (the
// reference rounding, in float64).
func checkFromF32[T uint8 | uint16](t *testing.T, name string, in []float32, conv func(float32) T, round func(float64) T, nan func(bits uint32) T) {
	t.Helper()
	for _, v := range in {
		for _, x := range []float32{v, -v} {
			got, xb := conv(x), math.Float32bits(x)
			if x != x {
				if want := nan(xb); got != want {
					t.Fatalf("%s(NaN %#08x) = %#x, want %#x", name, xb, got, want)
				}
				continue
			}
			if want := round(float64(x)); got != want {
				t.Fatalf("%s(%g = %#08x) = %#x, want %#x", name, x, xb, got, want)
			}
		}
	}
}
