package dtype

import (
	"math"
	"testing"
)

func TestPutGetRoundTrip(t *testing.T) {
	cases := []struct {
		d        DType
		in, want float64
	}{
		{Int8, 127, 127}, {Int8, 128, -128}, {Int8, -129, 127},
		{Uint8, 255, 255}, {Uint8, 256, 0}, {Uint8, -1, 255},
		{Int32, math.MaxInt32 + 1, math.MinInt32}, {Int64, -5, -5},
		{Float16, 1.0 / 3, 0.333251953125}, {Float16, 70000, math.Inf(1)},
		{BFloat16, 1.0 / 3, 0.333984375}, {Float32, 0.1, float64(float32(0.1))},
		{Float64, 0.1, 0.1},
		{Uint32, -1, math.MaxUint32}, {Uint32, 1 << 32, 0}, {Uint32, 7, 7},
		{Uint64, -1, math.MaxUint64}, {Uint64, 1 << 63, 1 << 63}, {Uint64, 1e19, 1e19},
		{Float8E4M3, 1.0 / 3, 0.34375}, {Float8E4M3, 1000, 448}, {Float8E4M3, -1e-4, 0},
		{Float8E5M2, 1.0 / 3, 0.3125}, {Float8E5M2, math.Inf(1), 57344}, {Float8E5M2, 3, 3},
	}
	for _, c := range cases {
		b := make([]byte, 3*c.d.Size())
		Put(b, 1, c.d, c.in)
		if got := Get(b, 1, c.d); got != c.want {
			t.Errorf("%v: Put(%v) then Get = %v, want %v", c.d, c.in, got, c.want)
		}
		if Get(b, 0, c.d) != 0 || Get(b, 2, c.d) != 0 {
			t.Errorf("%v: Put wrote outside element 1: % x", c.d, b)
		}
		if r := Round(c.in, c.d); r != c.want {
			t.Errorf("%v: Round(%v) = %v, want %v", c.d, c.in, r, c.want)
		}
	}
}

func TestParseDTypeNames(t *testing.T) {
	for _, d := range All() {
		got, err := ParseDType(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", d.String(), got, err, d)
		}
	}
	for name, want := range map[string]DType{"float8_e4m3fn": Float8E4M3, "fp8e5m2": Float8E5M2, "u64": Uint64, "UINT32": Uint32} {
		if got, err := ParseDType(name); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if len(All()) != int(numDTypes) || len(dtypeNames) != int(numDTypes) {
		t.Errorf("All has %d types, names %d, want %d", len(All()), len(dtypeNames), numDTypes)
	}
}

// TestFold: the reference reduction of one element over ranks, against
// values worked out by hand, avg truncating toward zero for integers only.
func TestFold(t *testing.T) {
	vs := []float64{3, -7, 2}
	at := func(r int) float64 { return vs[r] }
	for _, tc := range []struct {
		op   Op
		d    DType
		want float64
	}{
		{Sum, Float32, -2},
		{Prod, Int32, -42},
		{Min, Int8, -7},
		{Max, Float64, 3},
		{Avg, Float32, -2.0 / 3},
		{Avg, Int32, 0}, // -0.67 toward zero
	} {
		if got := Fold(tc.op, tc.d, len(vs), at); got != tc.want {
			t.Errorf("Fold(%v, %v) = %v, want %v", tc.op, tc.d, got, tc.want)
		}
	}
	if got := Fold(Avg, Int64, 2, func(r int) float64 { return []float64{-3, -4}[r] }); got != -3 {
		t.Errorf("Fold(avg, int64) of -3, -4 = %v, want -3 (toward zero)", got)
	}
}
