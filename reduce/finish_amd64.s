//go:build !purego

#include "textflag.h"
#include "bf16_amd64.h"

// Avg's final division for the float types: func(dst *byte, n int, d)
// divides the elements in n bytes at dst by d (broadcast into Y12); n is a
// multiple of the block (16 bytes for float16, 32 for the others). LOAD
// widens a block into a register, STORE narrows it back.

#define F32LOAD(M, X) VMOVUPS M, X
#define F32STORE(X, M, T1, T2) VMOVUPS X, M
#define F32DIV(X) VDIVPS Y12, X, X
#define F64LOAD(M, X) VMOVUPD M, X
#define F64STORE(X, M, T1, T2) VMOVUPD X, M
#define F64DIV(X) VDIVPD Y12, X, X
#define F16LOAD(M, X) VCVTPH2PS M, X
#define F16STORE(X, M, T1, T2) VCVTPS2PH $0, X, M
#define DIVBODY(LOAD, DIV, STORE, BLOCK) \
	CMPQ CX, $(4*BLOCK); \
	JB   one; \
four: \
	LOAD((DI), Y0); \
	LOAD(BLOCK(DI), Y1); \
	LOAD((2*BLOCK)(DI), Y2); \
	LOAD((3*BLOCK)(DI), Y3); \
	DIV(Y0); \
	DIV(Y1); \
	DIV(Y2); \
	DIV(Y3); \
	STORE(Y0, (DI), Y4, Y5); \
	STORE(Y1, BLOCK(DI), Y6, Y7); \
	STORE(Y2, (2*BLOCK)(DI), Y8, Y9); \
	STORE(Y3, (3*BLOCK)(DI), Y10, Y11); \
	ADDQ $(4*BLOCK), DI; \
	SUBQ $(4*BLOCK), CX; \
	CMPQ CX, $(4*BLOCK); \
	JAE  four; \
one: \
	CMPQ CX, $BLOCK; \
	JB   done; \
	LOAD((DI), Y0); \
	DIV(Y0); \
	STORE(Y0, (DI), Y4, Y5); \
	ADDQ $BLOCK, DI; \
	SUBQ $BLOCK, CX; \
	JMP  one; \
done: \
	VZEROUPPER; \
	RET

// func divF32(dst *byte, n int, d float32)
TEXT ·divF32(SB), NOSPLIT, $0-20
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS d+16(FP), Y12
	DIVBODY(F32LOAD, F32DIV, F32STORE, 32)

// func divF64(dst *byte, n int, d float64)
TEXT ·divF64(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSD d+16(FP), Y12
	DIVBODY(F64LOAD, F64DIV, F64STORE, 32)

// func divF16(dst *byte, n int, d float32)
TEXT ·divF16(SB), NOSPLIT, $0-20
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS d+16(FP), Y12
	DIVBODY(F16LOAD, F32DIV, F16STORE, 16)

// BF16DIV divides one 32-byte block of 16 bfloat16 at M(DI) by Y12 (see
// bf16_amd64.h), through registers A..D.
#define BF16DIV(M, A, B, C, D) \
	VMOVDQU M(DI), A; \
	BF16SPLIT(A, A, B); \
	VDIVPS Y12, A, A; \
	VDIVPS Y12, B, B; \
	BF16RNE(A, C); \
	BF16RNE(B, D); \
	BF16JOIN(A, B); \
	VMOVDQU A, M(DI)

// func divBF16(dst *byte, n int, d float32); n is a multiple of 32.
TEXT ·divBF16(SB), NOSPLIT, $0-20
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS d+16(FP), Y12
	BF16CONSTS
	CMPQ CX, $64
	JB   one

two:
	BF16DIV(0, Y0, Y1, Y2, Y3)
	BF16DIV(32, Y4, Y5, Y6, Y7)
	ADDQ $64, DI
	SUBQ $64, CX
	CMPQ CX, $64
	JAE  two

one:
	CMPQ CX, $32
	JB   done
	BF16DIV(0, Y0, Y1, Y2, Y3)
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  one

done:
	VZEROUPPER
	RET
