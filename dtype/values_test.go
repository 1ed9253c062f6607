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
