package dtype

import (
	"math"
	"testing"
)

// conversion is a float32 conversion under test, named, its result
// widened to 16 bits.
type conversion struct {
	name string
	conv func(float32) uint16
}

func f8Conv(f f8Format) conversion {
	return conversion{f.name, func(x float32) uint16 { return uint16(f.fromF32(x)) }}
}

func halfConv(f halfFormat) conversion { return conversion{f.name, f.fromF32} }

// special is a float32 input whose conversion a format must get right,
// and the bits it must give.
type special struct {
	name string
	in   float32
	want uint16
}

// TestSpecialValues: every format's rounding, saturation, infinities,
// subnormals and signed zeros on hand-picked inputs.
func TestSpecialValues(t *testing.T) {
	for _, f := range []struct {
		c     conversion
		cases []special
	}{
		{f8Conv(e4m3()), []special{
			{"one", 1, 0x38},
			{"max", 448, 0x7e},
			{"just above max rounds down", 463, 0x7e},
			{"half-way above max saturates", 464, 0x7e},
			{"inf saturates", float32(math.Inf(1)), 0x7e},
			{"-inf saturates", float32(math.Inf(-1)), 0xfe},
			{"smallest subnormal", 0x1p-9, 0x01},
			{"tie below smallest subnormal", 0x1p-10, 0x00},
			{"negative underflow keeps sign", -0x1p-11, 0x80},
			{"tie to even", 1 + 0x1p-4, 0x38},
			{"tie to odd rounds up", 1 + 0x3p-4, 0x3a},
		}},
		{f8Conv(e5m2()), []special{
			{"e5m2 one", 1, 0x3c},
			{"e5m2 max", 57344, 0x7b},
			{"e5m2 overflow saturates", 65504, 0x7b},
			{"e5m2 inf saturates", float32(math.Inf(1)), 0x7b},
			{"e5m2 smallest subnormal", 0x1p-16, 0x01},
			{"e5m2 tie to even", 1 + 0x1p-3, 0x3c},
		}},
		{halfConv(f16Format()), []special{
			{"one", 1, 0x3c00},
			{"max finite", 65504, 0x7bff},
			{"overflow tie to inf", 65520, 0x7c00},
			{"below overflow tie", 65519.99, 0x7bff},
			{"smallest subnormal", 0x1p-24, 0x0001},
			{"tie below smallest subnormal", 0x1p-25, 0x0000},
			{"above tie below smallest subnormal", 0x1.000002p-25, 0x0001},
			{"subnormal tie to even up", 0x3p-25, 0x0002},
			{"subnormal tie to even down", 0x5p-25, 0x0002},
			{"largest subnormal rounds to normal", 0x1.fffp-15, 0x0400},
			{"normal tie to even", 1 + 0x1p-11, 0x3c00},
			{"normal tie to odd up", 1 + 0x3p-11, 0x3c02},
			{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
			{"-inf", float32(math.Inf(-1)), 0xfc00},
		}},
		{halfConv(bf16Format()), []special{
			{"bf16 one", 1, 0x3f80},
			{"bf16 tie to even", 1 + 0x1p-8, 0x3f80},
			{"bf16 tie to odd up", 1 + 0x3p-8, 0x3f82},
			{"bf16 overflow", math.MaxFloat32, 0x7f80},
			{"bf16 subnormal", math.Float32frombits(0x00018000), 0x0002},
			{"bf16 negative zero", float32(math.Copysign(0, -1)), 0x8000},
		}},
	} {
		for _, tc := range f.cases {
			if got := f.c.conv(tc.in); got != tc.want {
				t.Errorf("%s: %s(%g) = %#x, want %#x", tc.name, f.c.name, tc.in, got, tc.want)
			}
		}
	}
}
