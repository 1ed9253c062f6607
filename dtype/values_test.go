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
