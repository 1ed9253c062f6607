package dtype

import "math"

// IEEE 754 binary16 (Float16) and bfloat16 (BFloat16) conversions.
//
// Widening (to float32) is exact. Narrowing (from float32) rounds to nearest,
// ties to even, like the hardware instructions (x86 F16C VCVTPS2PH with
// rounding control 0, CUDA __float2half_rn / __float2bfloat16_rn):
//   - finite values too large for the format become ±Inf;
//   - ±Inf stays ±Inf, ±0 keeps its sign, subnormals are rounded correctly;
//   - a NaN stays a NaN: the result is quiet (the quiet bit is set) and keeps
//     the sign and the top bits of the payload.
//
// Widening a signalling float16 NaN quiets it, as VCVTPH2PS does; widening a
// bfloat16 is a plain 16-bit shift and keeps every bit.

// Float16ToFloat32 returns the float32 value of the binary16 bits h.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	em := uint32(h & 0x7fff) // exponent and mantissa
	switch {
	case em > 0x7c00: // NaN: quiet it (em<<13 lands inside the exponent's ones)
		return math.Float32frombits(sign | 0x7fc00000 | em<<13)
	case em == 0x7c00:
		return math.Float32frombits(sign | 0x7f800000)
	case em >= 0x0400: // normal: rebias the exponent (15 → 127)
		return math.Float32frombits(sign | (em<<13 + 112<<23))
	}
	// Zero or subnormal: em·2⁻²⁴, exact in float32 (and a normal float32,
	// so the result does not depend on denormals-are-zero modes).
	return math.Float32frombits(sign | math.Float32bits(float32(em)*0x1p-24))
}

// Float32ToFloat16 rounds f to binary16 bits (nearest, ties to even).
func Float32ToFloat16(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	x &^= 0x80000000
	switch {
	case x > 0x7f800000: // NaN: quiet it, keep the top of the payload
		return sign | 0x7e00 | uint16(x>>13)&0x3ff
	case x >= 0x477ff000: // ≥ 65520 (half-way above the largest finite, 65504), or Inf
		return sign | 0x7c00
	case x >= 0x38800000: // ≥ 2⁻¹⁴: normal binary16
		r := x - 112<<23     // rebias the exponent (127 → 15)
		r += 0xfff + r>>13&1 // round the 13 dropped bits, ties to even
		return sign | uint16(r>>13)
	case x < 0x33000000: // < 2⁻²⁵: rounds to zero (2⁻²⁵ itself is a tie to 0)
		return sign
	}
	// Subnormal binary16: round(|f|·2²⁴) to an integer. |f|·2²⁴ is exact and
	// below 1024; adding 2²³ makes the float32 addition round it to an
	// integer, nearest even, which is then the low mantissa bits. A result
	// of 1024 is the smallest normal, 0x0400, as it should be.
	v := float32(math.Float32frombits(x)*0x1p24 + 0x1p23)
	return sign | uint16(math.Float32bits(v)-0x4b000000)
}

// BFloat16ToFloat32 returns the float32 value of the bfloat16 bits b.
func BFloat16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// Float32ToBFloat16 rounds f to bfloat16 bits (nearest, ties to even).
func Float32ToBFloat16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7fffffff > 0x7f800000 {
		return uint16(x>>16) | 0x40 // NaN: quiet it
	}
	// Adding 0x7fff plus the kept LSB rounds ties to even; a carry out of the
	// largest finite value lands on Inf, which is the right overflow.
	return uint16((x + 0x7fff + x>>16&1) >> 16)
}
