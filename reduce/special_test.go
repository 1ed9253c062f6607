package reduce

import (
	"math"
	"testing"

	"github.com/flexlink/flexlink/dtype"
)

// TestReduceSpecialPairs combines every pair of edge values (zeros of both
// signs, infinities, NaNs, extremes, subnormals, integer limits) on every
// path, at an offset that leaves the elements misaligned, and long enough
// that the vector kernels see them.
func TestReduceSpecialPairs(t *testing.T) {
	for _, dt := range dtype.All() {
		sp := specials(dt)
		n := len(sp) * len(sp)
		a, b := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
		for i, x := range sp {
			for j, y := range sp {
				setElem(a, dt, i*len(sp)+j, x)
				setElem(b, dt, i*len(sp)+j, y)
			}
		}
		for _, op := range dtype.Ops() {
			ref := misaligned(a, 0)
			if err := Ref(ref, b, dt, op); err != nil {
				t.Fatal(err)
			}
			for _, p := range paths() {
				for _, off := range []int{0, 1} {
					d := misaligned(a, off)
					if err := p.fn(d, misaligned(b, off), dt, op); err != nil {
						t.Fatal(err)
					}
					if err := checkOracle(dt, op, a, b, d); err != nil {
						t.Errorf("%s %s %s offset %d: %v", p.name, dt, op, off, err)
					}
					if err := sameAsRef(dt, d, ref); err != nil {
						t.Errorf("%s %s %s offset %d: %v", p.name, dt, op, off, err)
					}
				}
			}
		}
	}
}

// TestReduceKnownValues checks hand-worked cases (wrapping, signed zeros,
// NaN propagation, rounding ties of the 16-bit floats), each repeated
// through a buffer long enough for the vector kernels and a scalar tail.
func TestReduceKnownValues(t *testing.T) {
	f16 := func(f float32) uint64 { return uint64(dtype.Float32ToFloat16(f)) }
	bf16 := func(f float32) uint64 { return uint64(dtype.Float32ToBFloat16(f)) }
	f32 := func(f float32) uint64 { return uint64(math.Float32bits(f)) }
	f64 := math.Float64bits
	negZero := math.Copysign(0, -1)
	nan32 := f32(float32(math.NaN()))
	for _, tc := range []struct {
		name       string
		dt         dtype.DType
		op         dtype.Op
		a, b, want uint64 // element bits
		nan        bool   // want any quiet NaN instead
	}{
		{"int8 sum wraps", dtype.Int8, dtype.Sum, 127, 1, 0x80, false},
		{"int8 prod wraps", dtype.Int8, dtype.Prod, 0x80, 0xff, 0x80, false}, // -128 * -1
		{"int8 min signed", dtype.Int8, dtype.Min, 0x80, 0x7f, 0x80, false},
		{"uint8 sum wraps", dtype.Uint8, dtype.Sum, 255, 1, 0, false},
		{"uint8 prod wraps", dtype.Uint8, dtype.Prod, 16, 17, 16, false},
		{"uint8 max unsigned", dtype.Uint8, dtype.Max, 0x80, 0x7f, 0x80, false},
		{"int32 sum wraps", dtype.Int32, dtype.Sum, math.MaxInt32, 1, 1 << 31, false},
		{"int32 prod wraps", dtype.Int32, dtype.Prod, 1 << 16, 1 << 16, 0, false},
		{"int32 min signed", dtype.Int32, dtype.Min, 1 << 31, 1, 1 << 31, false},
		{"int64 sum wraps", dtype.Int64, dtype.Sum, math.MaxInt64, 1, 1 << 63, false},
		{"int64 prod wraps", dtype.Int64, dtype.Prod, 1 << 63, math.MaxUint64, 1 << 63, false},
		{"int64 max signed", dtype.Int64, dtype.Max, 1 << 63, 5, 5, false},
		{"float min -0 +0", dtype.Float32, dtype.Min, f32(0), f32(float32(negZero)), f32(float32(negZero)), false},
		{"float max -0 +0", dtype.Float32, dtype.Max, f32(float32(negZero)), f32(0), f32(0), false},
		{"float min NaN first", dtype.Float32, dtype.Min, nan32, f32(1), 0, true},
		{"float min NaN second", dtype.Float32, dtype.Min, f32(1), nan32, 0, true},
		{"float max NaN", dtype.Float32, dtype.Max, f32(-1), nan32, 0, true},
		{"float inf - inf", dtype.Float32, dtype.Sum, f32(float32(math.Inf(1))), f32(float32(math.Inf(-1))), 0, true},
		{"float -0 + -0", dtype.Float32, dtype.Sum, f32(float32(negZero)), f32(float32(negZero)), f32(float32(negZero)), false},
		{"float x + -x", dtype.Float32, dtype.Sum, f32(3), f32(-3), f32(0), false},
		{"float overflow", dtype.Float32, dtype.Prod, f32(1e30), f32(1e30), f32(float32(math.Inf(1))), false},
		{"double min -0 +0", dtype.Float64, dtype.Min, 0, f64(negZero), f64(negZero), false},
		{"double max NaN", dtype.Float64, dtype.Max, f64(math.NaN()), f64(2), 0, true},
		{"double 0 * inf", dtype.Float64, dtype.Prod, 0, f64(math.Inf(1)), 0, true},
		{"half subnormal sum", dtype.Float16, dtype.Sum, 0x0001, 0x0001, 0x0002, false},
		{"half subnormal to normal", dtype.Float16, dtype.Sum, 0x03ff, 0x0001, 0x0400, false},
		{"half tie to even down", dtype.Float16, dtype.Sum, f16(2048), f16(1), f16(2048), false},
		{"half tie to even up", dtype.Float16, dtype.Sum, f16(2050), f16(1), f16(2052), false},
		{"half overflow", dtype.Float16, dtype.Sum, f16(65504), f16(16), 0x7c00, false},
		{"half below overflow", dtype.Float16, dtype.Sum, f16(65504), f16(8), f16(65504), false},
		{"half prod underflow", dtype.Float16, dtype.Prod, 0x0001, f16(0.5), 0x0000, false},
		{"half prod rounds up", dtype.Float16, dtype.Prod, 0x0003, f16(0.5), 0x0002, false},
		{"half min -0 +0", dtype.Float16, dtype.Min, 0x0000, 0x8000, 0x8000, false},
		{"half max NaN", dtype.Float16, dtype.Max, 0x7e00, f16(1), 0, true},
		{"bf16 tie to even down", dtype.BFloat16, dtype.Sum, bf16(256), bf16(1), bf16(256), false},
		{"bf16 tie to even up", dtype.BFloat16, dtype.Sum, bf16(258), bf16(1), bf16(260), false},
		{"bf16 overflow", dtype.BFloat16, dtype.Prod, bf16(1e38), bf16(10), 0x7f80, false},
		{"bf16 subnormal sum", dtype.BFloat16, dtype.Sum, 0x0001, 0x0001, 0x0002, false},
		{"bf16 max -0 +0", dtype.BFloat16, dtype.Max, 0x8000, 0x0000, 0x0000, false},
		{"bf16 min NaN", dtype.BFloat16, dtype.Min, bf16(1), 0xffc1, 0, true},
		{"uint32 sum wraps", dtype.Uint32, dtype.Sum, math.MaxUint32, 2, 1, false},
		{"uint32 prod wraps", dtype.Uint32, dtype.Prod, 1 << 31, 2, 0, false},
		{"uint32 min unsigned", dtype.Uint32, dtype.Min, 1 << 31, 1, 1, false},
		{"uint32 max unsigned", dtype.Uint32, dtype.Max, 1 << 31, 1, 1 << 31, false},
		{"uint64 sum wraps", dtype.Uint64, dtype.Sum, math.MaxUint64, 2, 1, false},
		{"uint64 prod wraps", dtype.Uint64, dtype.Prod, 1 << 63, 3, 1 << 63, false},
		{"uint64 min unsigned", dtype.Uint64, dtype.Min, 1 << 63, 5, 5, false},
		{"uint64 max unsigned", dtype.Uint64, dtype.Max, 1 << 63, 5, 1 << 63, false},
		{"e4m3 sum saturates", dtype.Float8E4M3, dtype.Sum, 0x7e, 0x7e, 0x7e, false},
		{"e4m3 prod saturates negative", dtype.Float8E4M3, dtype.Prod, 0x7e, 0xc0, 0xfe, false},
		{"e4m3 tie to even", dtype.Float8E4M3, dtype.Sum, 0x50, 0x30, 0x50, false},   // 16 + 0.5: tie, down to 16
		{"e4m3 tie to odd up", dtype.Float8E4M3, dtype.Sum, 0x51, 0x30, 0x52, false}, // 18 + 0.5: tie, up to 20
		{"e4m3 NaN", dtype.Float8E4M3, dtype.Sum, 0x7f, 0x38, 0, true},
		{"e4m3 min NaN", dtype.Float8E4M3, dtype.Min, 0x38, 0xff, 0, true},
		{"e4m3 min -0 +0", dtype.Float8E4M3, dtype.Min, 0x00, 0x80, 0x80, false},
		{"e4m3 subnormal sum", dtype.Float8E4M3, dtype.Sum, 0x01, 0x07, 0x08, false},
		{"e5m2 inf saturates", dtype.Float8E5M2, dtype.Sum, 0x7c, 0x3c, 0x7b, false},
		{"e5m2 max of inf saturates", dtype.Float8E5M2, dtype.Max, 0xfc, 0x3c, 0x3c, false},
		{"e5m2 min of -inf saturates", dtype.Float8E5M2, dtype.Min, 0xfc, 0x3c, 0xfb, false},
		{"e5m2 inf - inf", dtype.Float8E5M2, dtype.Sum, 0x7c, 0xfc, 0, true},
		{"e5m2 overflow saturates", dtype.Float8E5M2, dtype.Prod, 0x7b, 0x40, 0x7b, false},
	} {
		const n = 333
		a, b := make([]byte, n*tc.dt.Size()), make([]byte, n*tc.dt.Size())
		for i := range n {
			setElem(a, tc.dt, i, tc.a)
			setElem(b, tc.dt, i, tc.b)
		}
		for _, p := range paths() {
			d := misaligned(a, 0)
			if err := p.fn(d, b, tc.dt, tc.op); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				got := elem(d, tc.dt, i)
				if tc.nan {
					if err := checkFloat(tc.dt, got, math.NaN()); err != nil {
						t.Errorf("%s: %s element %d: %v", tc.name, p.name, i, err)
						break
					}
				} else if got != tc.want {
					t.Errorf("%s: %s element %d = %#x, want %#x", tc.name, p.name, i, got, tc.want)
					break
				}
			}
		}
	}
}
