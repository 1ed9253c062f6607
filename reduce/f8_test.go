package reduce

import (
	"math"
	"testing"

	"github.com/flexlink/flexlink/dtype"
)

// nccl8 models how NCCL reduces float8 on sm_90 (reduce_kernel.h): both
// operands widened to float16, the op in float16 (__hadd, __hmul, __hmin,
// __hmax: one rounding to float16), the result narrowed with the saturating
// conversion. NCCL's min/max skip a NaN operand (fminf semantics); flexlink's
// propagate it, so the NaN cases of min/max are left out.
func nccl8(dt dtype.DType, op dtype.Op, a, b uint8) (uint8, bool) {
	to, from := dtype.F8E4M3ToFloat32, dtype.Float32ToF8E4M3
	if dt == dtype.Float8E5M2 {
		to, from = dtype.F8E5M2ToFloat32, dtype.Float32ToF8E5M2
	}
	x, y := to(a), to(b)
	var r float32
	switch op {
	case dtype.Sum, dtype.Avg:
		r = x + y // exact (E4M3) or innocuous before the float16 rounding (E5M2)
	case dtype.Prod:
		r = x * y // exact
	case dtype.Min, dtype.Max:
		if x != x || y != y {
			return 0, false
		}
		r = fmin(x, y)
		if op == dtype.Max {
			r = fmax(x, y)
		}
	}
	h := dtype.Float16ToFloat32(dtype.Float32ToFloat16(r))
	return from(h), true
}

// TestF8PairsExhaustive: every pair of float8 values, every op, on every
// path, against the oracle (exact arithmetic, one saturating rounding) and
// against NCCL's float16 pipeline.
func TestF8PairsExhaustive(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.Float8E4M3, dtype.Float8E5M2} {
		a, b := make([]byte, 1<<16), make([]byte, 1<<16)
		for i := range a {
			a[i], b[i] = byte(i>>8), byte(i)
		}
		for _, op := range dtype.Ops() {
			for _, p := range paths() {
				d := misaligned(a, 0)
				if err := p.fn(d, b, dt, op); err != nil {
					t.Fatal(err)
				}
				if err := checkOracle(dt, op, a, b, d); err != nil {
					t.Fatalf("%s %s %s: %v", p.name, dt, op, err)
				}
				for i := range d {
					want, ok := nccl8(dt, op, a[i], b[i])
					if !ok {
						continue
					}
					got := d[i]
					if math.IsNaN(floatValue(dt, uint64(got))) && math.IsNaN(floatValue(dt, uint64(want))) {
						continue
					}
					if got != want {
						t.Fatalf("%s %s: %#02x %s %#02x = %#02x, NCCL's float16 path gives %#02x", p.name, dt, a[i], op, b[i], got, want)
					}
				}
			}
		}
		// PreMul against NCCL's float16 product, every value by every scalar.
		for s := range 256 {
			d := make([]byte, 256)
			if err := PreMul(d, b[:256], dt, []byte{byte(s)}); err != nil { // b[i] = i
				t.Fatal(err)
			}
			for i := range d {
				want, _ := nccl8(dt, dtype.Prod, byte(i), byte(s))
				if d[i] != want && !(math.IsNaN(floatValue(dt, uint64(d[i]))) && math.IsNaN(floatValue(dt, uint64(want)))) {
					t.Fatalf("premul %s: %#02x × %#02x = %#02x, NCCL gives %#02x", dt, i, s, d[i], want)
				}
			}
		}
	}
}
