package dtype

import "math"

// OCP 8-bit float (FP8) conversions, as NCCL and CUDA's cuda_fp8.h use them.
//
// E4M3 (the "fn" variant): 4 exponent bits (bias 7), 3 mantissa bits, no
// infinities; S.1111.111 is NaN, so the largest finite value is 448
// (S.1111.110). E5M2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE
// special values (S.11111.00 is ±Inf, S.11111.xx NaN), largest finite 57344;
// an E5M2 value is the top byte of the float16 with the same value.
//
// Widening (to float32) is exact; a NaN widens to a quiet float32 NaN with
// the same sign.
//
// Narrowing rounds to nearest, ties to even, and saturates as CUDA's
// __NV_SATFINITE conversions (PTX cvt.rn.satfinite.{e4m3,e5m2}x2) do, the
// conversions NCCL's fp8 reductions use:
//   - a finite value beyond the largest finite one, and ±Inf, become the
//     largest finite value of that sign (448 or 57344): never Inf, never a
//     NaN made from a number;
//   - a NaN becomes the NaN 0x7f with the input's sign bit;
//   - values at or below half the smallest subnormal become a zero of the
//     input's sign; subnormals are rounded correctly.

// F8E4M3ToFloat32 returns the float32 value of the E4M3 bits b.
func F8E4M3ToFloat32(b uint8) float32 {
	sign := uint32(b&0x80) << 24
	em := uint32(b & 0x7f)
	switch {
	case em == 0x7f:
		return math.Float32frombits(sign | 0x7fc00000)
	case em >= 0x08: // normal: rebias the exponent (7 → 127), mantissa to the top
		return math.Float32frombits(sign | (em<<20 + 120<<23))
	}
	// Zero or subnormal: em·2⁻⁹, exact.
	return math.Float32frombits(sign | math.Float32bits(float32(em)*0x1p-9))
}

// F8E5M2ToFloat32 returns the float32 value of the E5M2 bits b.
func F8E5M2ToFloat32(b uint8) float32 { return Float16ToFloat32(uint16(b) << 8) }

// Float32ToF8E4M3 rounds f to E4M3 bits (nearest even, saturating).
func Float32ToF8E4M3(f float32) uint8 { return float32ToF8(f, 3, 7, 0x7e) }

// Float32ToF8E5M2 rounds f to E5M2 bits (nearest even, saturating).
func Float32ToF8E5M2(f float32) uint8 { return float32ToF8(f, 2, 15, 0x7b) }

// float32ToF8 rounds f to an 8-bit float of manBits mantissa bits and the
// given exponent bias whose largest finite magnitude has the bits maxBits.
func float32ToF8(f float32, manBits, bias, maxBits uint32) uint8 {
	x := math.Float32bits(f)
	sign := uint8(x>>24) & 0x80
	x &^= 0x80000000
	if x > 0x7f800000 {
		return sign | 0x7f // NaN (in both formats)
	}
	var r uint32
	if x >= (128-bias)<<23 { // at least the smallest normal, 2^(1-bias)
		shift := 23 - manBits
		r = x - (127-bias)<<23 // rebias the exponent (127 → bias)
		r += 1<<(shift-1) - 1 + r>>shift&1
		r >>= shift // a carry out of the mantissa raises the exponent, as it should
	} else {
		// Subnormal (or zero): round |f| in units of the smallest
		// subnormal, 2^(1-bias-manBits); the scaling is exact, and a result
		// of 1<<manBits is the smallest normal's bits.
		v := math.Float32frombits(x) * float32(math.Ldexp(1, int(bias+manBits-1)))
		r = uint32(math.RoundToEven(float64(v)))
	}
	if r > maxBits { // beyond the largest finite value, ±Inf included: saturate
		r = maxBits
	}
	return sign | uint8(r)
}
