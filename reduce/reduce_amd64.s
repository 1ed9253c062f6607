//go:build !purego

#include "textflag.h"
#include "bf16_amd64.h"

// AVX2 kernels. Each is func(dst, src *byte, n int): dst[i] = dst[i] op src[i]
// over n bytes, n a multiple of the kernel's block (16 bytes for float16, 32
// for the others). Loads and stores are unaligned.
// The loops do two or four blocks per iteration while they can, then one at
// a time.
//
// Operator macros compute R = R op S for one register (R holds dst, S src),
// clobbering S, T1 and T2. R is always the first operand of the arithmetic
// (VADDPS S, R, R is R+S), as in the Go loops.

// Float min/max: VMINPS returns its second source when the inputs are equal
// or unordered, so take it both ways round and OR (min) or AND (max) the
// results: that picks -0 for min(-0, +0) and +0 for max. Where either input
// is NaN, blend in R+S, a quiet NaN, as the scalar code does.
#define FMINMAX(MINMAX, COMBINE, ADD, CMP, BLEND, R, S, T1, T2) \
	MINMAX S, R, T1; \
	MINMAX R, S, T2; \
	COMBINE T1, T2, T1; \
	CMP $3, S, R, T2; \
	ADD S, R, R; \
	BLEND T2, R, T1, R

#define ADDPS(R, S, T1, T2) VADDPS S, R, R
#define MULPS(R, S, T1, T2) VMULPS S, R, R
#define MINPS(R, S, T1, T2) FMINMAX(VMINPS, VORPS, VADDPS, VCMPPS, VBLENDVPS, R, S, T1, T2)
#define MAXPS(R, S, T1, T2) FMINMAX(VMAXPS, VANDPS, VADDPS, VCMPPS, VBLENDVPS, R, S, T1, T2)
#define ADDPD(R, S, T1, T2) VADDPD S, R, R
#define MULPD(R, S, T1, T2) VMULPD S, R, R
#define MINPD(R, S, T1, T2) FMINMAX(VMINPD, VORPD, VADDPD, VCMPPD, VBLENDVPD, R, S, T1, T2)
#define MAXPD(R, S, T1, T2) FMINMAX(VMAXPD, VANDPD, VADDPD, VCMPPD, VBLENDVPD, R, S, T1, T2)

#define ADDD(R, S, T1, T2) VPADDD S, R, R
#define MULD(R, S, T1, T2) VPMULLD S, R, R
#define MIND(R, S, T1, T2) VPMINSD S, R, R
#define MAXD(R, S, T1, T2) VPMAXSD S, R, R
#define MINUD(R, S, T1, T2) VPMINUD S, R, R
#define MAXUD(R, S, T1, T2) VPMAXUD S, R, R

// AVX2 has no 64-bit min/max: compare (R > S) and blend.
#define ADDQ4(R, S, T1, T2) VPADDQ S, R, R
#define MINQ(R, S, T1, T2) VPCMPGTQ S, R, T1; VPBLENDVB T1, S, R, R
#define MAXQ(R, S, T1, T2) VPCMPGTQ S, R, T1; VPBLENDVB T1, R, S, R

#define ADDB(R, S, T1, T2) VPADDB S, R, R
#define MINSB(R, S, T1, T2) VPMINSB S, R, R
#define MAXSB(R, S, T1, T2) VPMAXSB S, R, R
#define MINUB(R, S, T1, T2) VPMINUB S, R, R
#define MAXUB(R, S, T1, T2) VPMAXUB S, R, R

// There is no byte multiply: multiply the even bytes and the odd bytes as
// 16-bit words and keep the low byte of each product (the wrapped product,
// the same bits for int8 and uint8).
#define MULB(R, S, T1, T2) \
	VPMULLW S, R, T1; \
	VPSLLW $8, T1, T1; \
	VPSRLW $8, T1, T1; \
	VPSRLW $8, R, R; \
	VPSRLW $8, S, T2; \
	VPMULLW T2, R, R; \
	VPSLLW $8, R, R; \
	VPOR T1, R, R

// LOOP32 defines a kernel over 32-byte blocks.
#define LOOP32(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-24; \
	MOVQ dst+0(FP), DI; \
	MOVQ src+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	CMPQ CX, $128; \
	JB   one; \
four: \
	VMOVDQU (DI), Y0; \
	VMOVDQU 32(DI), Y1; \
	VMOVDQU 64(DI), Y2; \
	VMOVDQU 96(DI), Y3; \
	VMOVDQU (SI), Y4; \
	VMOVDQU 32(SI), Y5; \
	VMOVDQU 64(SI), Y6; \
	VMOVDQU 96(SI), Y7; \
	OP(Y0, Y4, Y8, Y9); \
	OP(Y1, Y5, Y10, Y11); \
	OP(Y2, Y6, Y12, Y13); \
	OP(Y3, Y7, Y14, Y15); \
	VMOVDQU Y0, (DI); \
	VMOVDQU Y1, 32(DI); \
	VMOVDQU Y2, 64(DI); \
	VMOVDQU Y3, 96(DI); \
	ADDQ $128, DI; \
	ADDQ $128, SI; \
	SUBQ $128, CX; \
	CMPQ CX, $128; \
	JAE  four; \
one: \
	CMPQ CX, $32; \
	JB   done; \
	VMOVDQU (DI), Y0; \
	VMOVDQU (SI), Y4; \
	OP(Y0, Y4, Y8, Y9); \
	VMOVDQU Y0, (DI); \
	ADDQ $32, DI; \
	ADDQ $32, SI; \
	SUBQ $32, CX; \
	JMP  one; \
done: \
	VZEROUPPER; \
	RET

LOOP32(·addF32, ADDPS)
LOOP32(·mulF32, MULPS)
LOOP32(·minF32, MINPS)
LOOP32(·maxF32, MAXPS)
LOOP32(·addF64, ADDPD)
LOOP32(·mulF64, MULPD)
LOOP32(·minF64, MINPD)
LOOP32(·maxF64, MAXPD)
LOOP32(·addI32, ADDD)
LOOP32(·mulI32, MULD)
LOOP32(·minI32, MIND)
LOOP32(·maxI32, MAXD)
LOOP32(·minU32, MINUD)
LOOP32(·maxU32, MAXUD)
LOOP32(·addI64, ADDQ4)
LOOP32(·minI64, MINQ)
LOOP32(·maxI64, MAXQ)
LOOP32(·addI8, ADDB)
LOOP32(·mulI8, MULB)
LOOP32(·minI8, MINSB)
LOOP32(·maxI8, MAXSB)
LOOP32(·minU8, MINUB)
LOOP32(·maxU8, MAXUB)

// LOOPF16 defines a float16 kernel over 16-byte blocks (8 elements): widen
// with VCVTPH2PS (exact), apply the float32 operator, narrow with VCVTPS2PH
// rounding to nearest even (immediate 0).
#define LOOPF16(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-24; \
	MOVQ dst+0(FP), DI; \
	MOVQ src+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	CMPQ CX, $64; \
	JB   one; \
four: \
	VCVTPH2PS (DI), Y0; \
	VCVTPH2PS 16(DI), Y1; \
	VCVTPH2PS 32(DI), Y2; \
	VCVTPH2PS 48(DI), Y3; \
	VCVTPH2PS (SI), Y4; \
	VCVTPH2PS 16(SI), Y5; \
	VCVTPH2PS 32(SI), Y6; \
	VCVTPH2PS 48(SI), Y7; \
	OP(Y0, Y4, Y8, Y9); \
	OP(Y1, Y5, Y10, Y11); \
	OP(Y2, Y6, Y12, Y13); \
	OP(Y3, Y7, Y14, Y15); \
	VCVTPS2PH $0, Y0, (DI); \
	VCVTPS2PH $0, Y1, 16(DI); \
	VCVTPS2PH $0, Y2, 32(DI); \
	VCVTPS2PH $0, Y3, 48(DI); \
	ADDQ $64, DI; \
	ADDQ $64, SI; \
	SUBQ $64, CX; \
	CMPQ CX, $64; \
	JAE  four; \
one: \
	CMPQ CX, $16; \
	JB   done; \
	VCVTPH2PS (DI), Y0; \
	VCVTPH2PS (SI), Y4; \
	OP(Y0, Y4, Y8, Y9); \
	VCVTPS2PH $0, Y0, (DI); \
	ADDQ $16, DI; \
	ADDQ $16, SI; \
	SUBQ $16, CX; \
	JMP  one; \
done: \
	VZEROUPPER; \
	RET

LOOPF16(·addF16, ADDPS)
LOOPF16(·mulF16, MULPS)
LOOPF16(·minF16, MINPS)
LOOPF16(·maxF16, MAXPS)

// BF16ONE reduces one 32-byte block of 16 bfloat16 (see bf16_amd64.h):
// dst at M(DI) with src at M(SI), through registers A..H.
#define BF16ONE(OP, M, A, B, C, D, E, F) \
	VMOVDQU M(DI), A; \
	VMOVDQU M(SI), C; \
	BF16SPLIT(A, A, B); \
	BF16SPLIT(C, C, D); \
	OP(A, C, E, F); \
	OP(B, D, E, F); \
	BF16RNE(A, E); \
	BF16RNE(B, F); \
	BF16JOIN(A, B); \
	VMOVDQU A, M(DI)

// LOOPBF16 defines a bfloat16 kernel over 32-byte blocks.
#define LOOPBF16(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-24; \
	MOVQ dst+0(FP), DI; \
	MOVQ src+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	BF16CONSTS; \
	CMPQ CX, $64; \
	JB   one; \
two: \
	BF16ONE(OP, 0, Y0, Y1, Y2, Y3, Y4, Y5); \
	BF16ONE(OP, 32, Y6, Y7, Y8, Y9, Y10, Y11); \
	ADDQ $64, DI; \
	ADDQ $64, SI; \
	SUBQ $64, CX; \
	CMPQ CX, $64; \
	JAE  two; \
one: \
	CMPQ CX, $32; \
	JB   done; \
	BF16ONE(OP, 0, Y0, Y1, Y2, Y3, Y4, Y5); \
	ADDQ $32, DI; \
	ADDQ $32, SI; \
	SUBQ $32, CX; \
	JMP  one; \
done: \
	VZEROUPPER; \
	RET

LOOPBF16(·addBF16, ADDPS)
LOOPBF16(·mulBF16, MULPS)
LOOPBF16(·minBF16, MINPS)
LOOPBF16(·maxBF16, MAXPS)
