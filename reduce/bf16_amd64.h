// Macros shared by the amd64 bfloat16 kernels.
//
// A register of 16 bfloat16 values is worked on as two registers of eight
// float32: the even elements (the low half of each 32-bit lane, shifted up)
// and the odd ones (the high half, low half cleared). Both are exact
// widenings. After the float32 arithmetic, BF16RNE rounds each lane in
// place and BF16JOIN puts the two halves back together with one word blend:
// no lane-crossing shuffles.

// BF16CONSTS sets Y13 = 1, Y14 = 0x7fff and Y15 = 0xffff0000 in every
// 32-bit lane.
#define BF16CONSTS \
	VPCMPEQD Y13, Y13, Y13; \
	VPSRLD $31, Y13, Y13; \
	VPCMPEQD Y14, Y14, Y14; \
	VPSRLD $17, Y14, Y14; \
	VPCMPEQD Y15, Y15, Y15; \
	VPSLLD $16, Y15, Y15

// BF16SPLIT widens the 16 bfloat16 in X into float32 lanes: EVEN gets
// elements 0, 2, 4, ..., ODD gets 1, 3, 5, ... X may be EVEN.
#define BF16SPLIT(X, EVEN, ODD) \
	VPAND Y15, X, ODD; \
	VPSLLD $16, X, EVEN

// BF16RNE rounds the float32 lanes of X to bfloat16, leaving the result in
// the high 16 bits (the low bits are garbage): x + 0x7fff + (bit 16 of x)
// rounds to nearest even, and a carry out of the largest finite value lands
// on Inf, as in dtype.Float32ToBFloat16.
//
// NaNs need no special case here, unlike in the scalar code: every NaN the
// kernels can meet is a NaN input widened from bfloat16 and quieted by the
// arithmetic, or the default NaN of an invalid operation; both have their
// low 16 bits clear, so the addition cannot carry out of them, and the high
// half is a quiet NaN already.
#define BF16RNE(X, T) \
	VPSRLD $16, X, T; \
	VPAND Y13, T, T; \
	VPADDD Y14, T, T; \
	VPADDD T, X, X

// BF16JOIN packs rounded EVEN and ODD lanes back into 16 bfloat16 in EVEN:
// shift the even results down, take the odd words from ODD.
#define BF16JOIN(EVEN, ODD) \
	VPSRLD $16, EVEN, EVEN; \
	VPBLENDW $0xaa, ODD, EVEN, EVEN
