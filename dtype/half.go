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
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		if man == 0 {
			return math.Float32frombits(sign | 0x7f800000) // ±Inf
		}
		return math.Float32frombits(sign | 0x7fc00000 | man<<13) // NaN, quieted
	case 0:
		if man == 0 {
			return math.Float32frombits(sign) // ±0
		}
		// Subnormal: man·2⁻²⁴. Normalise so the leading 1 becomes implicit.
		e := uint32(113) // float32 biased exponent of 2⁻¹⁴
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
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
	}
	// Subnormal binary16 (or zero): the result is round(|f|·2²⁴).
	e := x >> 23
	if e < 102 { // |f| < 2⁻²⁵: rounds to zero
		return sign
	}
	man := x&0x7fffff | 0x800000
	shift := 126 - e // 14..24
	m := man >> shift
	rem := man & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && m&1 == 1 {
		m++ // may carry into the smallest normal, 0x0400, which is right
	}
	return sign | uint16(m)
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
