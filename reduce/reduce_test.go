package reduce

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexlink/flexlink/dtype"
)

// path is one implementation of Reduce's contract.
type path struct {
	name string
	fn   func(dst, src []byte, dt dtype.DType, op dtype.Op) error
}

// paths lists Reduce (vector kernels where the CPU has them), the portable
// Go loops called directly (the fallback, forced even on AVX2 machines), and
// the scalar reference.
func paths() []path {
	return []path{
		{"Reduce", Reduce},
		{"Go", func(dst, src []byte, dt dtype.DType, op dtype.Op) error {
			if err := check(dst, src, dt, op); err != nil {
				return err
			}
			reduceGo(dst, src, dt, op)
			return nil
		}},
		{"Ref", Ref},
	}
}

// floatBits describes a float dtype's fields: exponent and mantissa widths.
func floatBits(dt dtype.DType) (expBits, manBits uint) {
	switch dt {
	case dtype.Float16:
		return 5, 10
	case dtype.BFloat16:
		return 8, 7
	case dtype.Float32:
		return 8, 23
	case dtype.Float8E4M3:
		return 4, 3
	case dtype.Float8E5M2:
		return 5, 2
	}
	return 11, 52
}

// specials returns the edge values of dt as bits: zeros, infinities, quiet
// and signalling NaNs, extremes, subnormals, min/max integers.
func specials(dt dtype.DType) []uint64 {
	bits := uint(8 * dt.Size())
	sign := uint64(1) << (bits - 1)
	if !dt.IsFloat() {
		all := uint64(1)<<bits - 1
		if bits == 64 {
			all = math.MaxUint64
		}
		return []uint64{0, 1, all, sign - 1, sign, sign + 1, 2, all - 1}
	}
	eb, mb := floatBits(dt)
	inf := (uint64(1)<<eb - 1) << mb
	one := (uint64(1)<<(eb-1) - 1) << mb
	vals := []uint64{0, inf, inf | 1<<(mb-1), inf | 1, inf - 1, 1, 1<<mb - 1, 1 << mb, one, one | 1}
	if dt.IsFloat8() { // E4M3's NaN and largest value (E5M2's quiet NaN and another NaN)
		vals = append(vals, 0x7f, 0x7e)
	}
	for _, v := range vals[:len(vals):len(vals)] {
		vals = append(vals, v|sign)
	}
	return vals
}

// gen makes n random elements of dt: a mix of edge values, random bit
// patterns, small integers (for rounding ties in the narrow floats) and
// moderate values (so products stay finite).
func gen(rng *rand.Rand, dt dtype.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	sp := specials(dt)
	for i := range n {
		var v uint64
		switch r := rng.IntN(16); {
		case r == 0:
			v = sp[rng.IntN(len(sp))]
		case r < 5 || !dt.IsFloat():
			v = rng.Uint64()
		case r < 9:
			v = encode(dt, float64(rng.IntN(8193)-4096))
		default:
			v = encode(dt, math.Ldexp(rng.Float64()+1, rng.IntN(21)-10)*float64(1-2*rng.IntN(2)))
		}
		setElem(b, dt, i, v)
	}
	return b
}

// encode converts a float64 to dt's bits (the inputs need only be valid).
func encode(dt dtype.DType, v float64) uint64 {
	switch dt {
	case dtype.Float16:
		return uint64(dtype.Float32ToFloat16(float32(v)))
	case dtype.BFloat16:
		return uint64(dtype.Float32ToBFloat16(float32(v)))
	case dtype.Float32:
		return uint64(math.Float32bits(float32(v)))
	case dtype.Float8E4M3:
		return uint64(dtype.Float32ToF8E4M3(float32(v)))
	case dtype.Float8E5M2:
		return uint64(dtype.Float32ToF8E5M2(float32(v)))
	}
	return math.Float64bits(v)
}

// misaligned returns a copy of b starting off bytes into a fresh buffer.
func misaligned(b []byte, off int) []byte {
	buf := make([]byte, off+len(b))
	copy(buf[off:], b)
	return buf[off:]
}

// checkFloat compares got to want: equal with the same sign, or both NaN
// with a quiet NaN in got.
func checkFloat(dt dtype.DType, gotBits uint64, want float64) error {
	got := floatValue(dt, gotBits)
	if math.IsNaN(want) {
		_, mb := floatBits(dt)
		if !math.IsNaN(got) || gotBits&(1<<(mb-1)) == 0 {
			return fmt.Errorf("got %v (%#x), want a quiet NaN", got, gotBits)
		}
		return nil
	}
	if got != want || math.Signbit(got) != math.Signbit(want) {
		return fmt.Errorf("got %v (%#x), want %v", got, gotBits, want)
	}
	return nil
}

// checkOracle checks every element of out = a op b against the oracle.
func checkOracle(dt dtype.DType, op dtype.Op, a, b, out []byte) error {
	for i := range len(a) / dt.Size() {
		x, y, got := elem(a, dt, i), elem(b, dt, i), elem(out, dt, i)
		if !dt.IsFloat() {
			if want := oracleInt(dt, op, x, y); got != want {
				return fmt.Errorf("element %d: %#x %s %#x = %#x, want %#x", i, x, op, y, got, want)
			}
			continue
		}
		want := oracleFloat(dt, op, floatValue(dt, x), floatValue(dt, y))
		if err := checkFloat(dt, got, want); err != nil {
			return fmt.Errorf("element %d: %#x %s %#x: %w", i, x, op, y, err)
		}
	}
	return nil
}

// sameAsRef compares two outputs byte for byte, except that where both hold
// a NaN the payloads may differ.
func sameAsRef(dt dtype.DType, got, ref []byte) error {
	for i := range len(got) / dt.Size() {
		g, r := elem(got, dt, i), elem(ref, dt, i)
		if g != r && !(dt.IsFloat() && math.IsNaN(floatValue(dt, g)) && math.IsNaN(floatValue(dt, r))) {
			return fmt.Errorf("element %d: %#x, Ref gives %#x", i, g, r)
		}
	}
	return nil
}

func TestReduceMatchesOracle(t *testing.T) {
	lengths := []int{0, 1, 3, 7, 8, 15, 16, 31, 33, 64, 1000, 4099}
	offsets := [][2]int{{0, 0}, {1, 1}, {1, 3}, {3, 0}} // byte offsets of dst, src
	for _, dt := range dtype.All() {
		for _, op := range dtype.Ops() {
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(dt), uint64(op)))
				for _, n := range lengths {
					for _, off := range offsets {
						a, b := gen(rng, dt, n), gen(rng, dt, n)
						ref := misaligned(a, 0)
						if err := Ref(ref, b, dt, op); err != nil {
							t.Fatal(err)
						}
						for _, p := range paths() {
							d, s := misaligned(a, off[0]), misaligned(b, off[1])
							if err := p.fn(d, s, dt, op); err != nil {
								t.Fatalf("%s n=%d: %v", p.name, n, err)
							}
							if !bytes.Equal(s, b) {
								t.Fatalf("%s n=%d off=%v: src was modified", p.name, n, off)
							}
							if err := checkOracle(dt, op, a, b, d); err != nil {
								t.Fatalf("%s n=%d off=%v: %v", p.name, n, off, err)
							}
							if err := sameAsRef(dt, d, ref); err != nil {
								t.Fatalf("%s n=%d off=%v: %v", p.name, n, off, err)
							}
						}
					}
				}
			})
		}
	}
}

func TestReduceAliased(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, dt := range dtype.All() {
		for _, op := range dtype.Ops() {
			a := gen(rng, dt, 517)
			for _, p := range paths() {
				d := misaligned(a, 0)
				if err := p.fn(d, d, dt, op); err != nil {
					t.Fatal(err)
				}
				if err := checkOracle(dt, op, a, a, d); err != nil {
					t.Errorf("%s %s %s with dst == src: %v", p.name, dt, op, err)
				}
			}
		}
	}
}
