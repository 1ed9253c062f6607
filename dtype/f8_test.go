package dtype

import (
	"math"
	"math/rand/v2"
	"testing"
)

// An independent reference for the float8 formats: decode by fields with
// math.Ldexp, round by scanning every finite value.

type f8Format struct {
	name     string
	manBits  int
	bias     int
	hasInf   bool // E5M2: S.11111.00 is Inf, S.11111.xx NaN; E4M3: only S.1111.111 is NaN
	maxFin   uint8
	toF32    func(uint8) float32
	fromF32  func(float32) uint8
	maxValue float64
}

func e4m3() f8Format {
	return f8Format{"e4m3", 3, 7, false, 0x7e, F8E4M3ToFloat32, Float32ToF8E4M3, 448}
}

func e5m2() f8Format {
	return f8Format{"e5m2", 2, 15, true, 0x7b, F8E5M2ToFloat32, Float32ToF8E5M2, 57344}
}

func (f f8Format) isNaN(b uint8) bool {
	em := b & 0x7f
	if f.hasInf {
		return em > 0x7c
	}
	return em == 0x7f
}

// decode returns b's value from its fields (NaN as NaN).
func (f f8Format) decode(b uint8) float64 {
	if f.isNaN(b) {
		return math.NaN()
	}
	exp := int(b&0x7f) >> f.manBits
	man := int(b) & (1<<f.manBits - 1)
	var v float64
	switch {
	case f.hasInf && b&0x7f == 0x7c:
		v = math.Inf(1)
	case exp == 0:
		v = math.Ldexp(float64(man), 1-f.bias-f.manBits)
	default:
		v = math.Ldexp(float64(man|1<<f.manBits), exp-f.bias-f.manBits)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

// round is the saturating round to nearest even of v (not NaN), by scanning
// the finite values 0..maxFin, which are ordered like their bits.
func (f f8Format) round(v float64) uint8 {
	var sign uint8
	if math.Signbit(v) {
		sign, v = 0x80, -v
	}
	if v >= f.maxValue { // saturate, Inf included
		return sign | f.maxFin
	}
	k := 0
	for k < int(f.maxFin) && f.decode(uint8(k+1)) <= v {
		k++
	}
	lo, hi := f.decode(uint8(k)), f.decode(uint8(k+1))
	return sign | uint8(nearestEven(v, lo, hi, k))
}

func TestF8ToFloat32Exhaustive(t *testing.T) {
	for _, f := range []f8Format{e4m3(), e5m2()} {
		for i := range 256 {
			b := uint8(i)
			got := f.toF32(b)
			if f.isNaN(b) {
				gb := math.Float32bits(got)
				if got == got || gb&0x400000 == 0 || gb>>31 != uint32(b>>7) {
					t.Fatalf("%s %#02x: got %#08x, want a quiet NaN of the same sign", f.name, b, gb)
				}
				continue
			}
			want := f.decode(b)
			if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
				t.Fatalf("%s %#02x: got %v, want %v", f.name, b, got, want)
			}
		}
	}
}

func TestF8RoundTripExhaustive(t *testing.T) {
	for _, f := range []f8Format{e4m3(), e5m2()} {
		for i := range 256 {
			b := uint8(i)
			want := b
			switch {
			case f.isNaN(b):
				want = b&0x80 | 0x7f
			case f.hasInf && b&0x7f == 0x7c:
				want = b&0x80 | f.maxFin // Inf saturates
			}
			if got := f.fromF32(f.toF32(b)); got != want {
				t.Fatalf("%s %#02x: round trip gives %#02x, want %#02x", f.name, b, got, want)
			}
		}
	}
}

// TestFloat32ToF8Rounding probes every rounding boundary (each value, each
// midpoint, and their float32 neighbours) and random float32 bit patterns.
func TestFloat32ToF8Rounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range []f8Format{e4m3(), e5m2()} {
		var in []float32
		for k := 0; k <= int(f.maxFin); k++ {
			lo := f.decode(uint8(k))
			hi := lo + math.Ldexp(1, int(f.maxFin>>f.manBits)-f.bias-f.manBits) // past the max: one more step
			if k < int(f.maxFin) {
				hi = f.decode(uint8(k + 1))
			}
			for _, v := range []float32{float32(lo), float32((lo + hi) / 2)} {
				in = append(in, v, math.Nextafter32(v, 0), math.Nextafter32(v, float32(math.Inf(1))))
			}
		}
		for range 1 << 16 {
			in = append(in, math.Float32frombits(rng.Uint32()))
		}
		in = append(in, 0, float32(math.Inf(1)), math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-30, 65520, 1e10)
		checkFromF32(t, f.name, in, f.fromF32, f.round, func(xb uint32) uint8 { return uint8(xb>>24)&0x80 | 0x7f })
	}
}
