//go:build !purego

package reduce

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/flexlink/flexlink/dtype"
)

// Vector kernels in reduce_amd64.s: dst[i] = dst[i] op src[i] over n bytes,
// n a multiple of the kernel's block size (see kernel).

//go:noescape
func addF32(dst, src *byte, n int)

//go:noescape
func mulF32(dst, src *byte, n int)

//go:noescape
func minF32(dst, src *byte, n int)

//go:noescape
func maxF32(dst, src *byte, n int)

//go:noescape
func addF64(dst, src *byte, n int)

//go:noescape
func mulF64(dst, src *byte, n int)

//go:noescape
func minF64(dst, src *byte, n int)

//go:noescape
func maxF64(dst, src *byte, n int)

//go:noescape
func addI32(dst, src *byte, n int)

//go:noescape
func mulI32(dst, src *byte, n int)

//go:noescape
func minI32(dst, src *byte, n int)

//go:noescape
func maxI32(dst, src *byte, n int)

//go:noescape
func minU32(dst, src *byte, n int)

//go:noescape
func maxU32(dst, src *byte, n int)

//go:noescape
func addI64(dst, src *byte, n int)

//go:noescape
func minI64(dst, src *byte, n int)

//go:noescape
func maxI64(dst, src *byte, n int)

//go:noescape
func addI8(dst, src *byte, n int)

//go:noescape
func mulI8(dst, src *byte, n int)

//go:noescape
func minI8(dst, src *byte, n int)

//go:noescape
func maxI8(dst, src *byte, n int)

//go:noescape
func minU8(dst, src *byte, n int)

//go:noescape
func maxU8(dst, src *byte, n int)

//go:noescape
func addF16(dst, src *byte, n int)

//go:noescape
func mulF16(dst, src *byte, n int)

//go:noescape
func minF16(dst, src *byte, n int)

//go:noescape
func maxF16(dst, src *byte, n int)

//go:noescape
func addBF16(dst, src *byte, n int)

//go:noescape
func mulBF16(dst, src *byte, n int)

//go:noescape
func minBF16(dst, src *byte, n int)

//go:noescape
func maxBF16(dst, src *byte, n int)

type kernelFunc func(dst, src *byte, n int)

// kernel returns the vector kernel for (dt, op) and its block size in
// bytes, or nil where there is none: the CPU lacks AVX2 (or F16C for
// float16), or AVX2 has no instruction for the op (64-bit prod, uint64
// min/max, and the float8 types, which the Go loops do). The CPU features are fixed for the process, so this switch
// decides the same way on every call.
func kernel(dt dtype.DType, op dtype.Op) (kernelFunc, int) {
	if !cpu.X86.HasAVX2 {
		return nil, 0
	}
	pick := func(sum, prod, lo, hi kernelFunc) kernelFunc {
		switch op {
		case dtype.Sum, dtype.Avg:
			return sum
		case dtype.Prod:
			return prod
		case dtype.Min:
			return lo
		case dtype.Max:
			return hi
		}
		return nil
	}
	switch dt {
	case dtype.Int8:
		return pick(addI8, mulI8, minI8, maxI8), 32
	case dtype.Uint8: // wrapped sums and products have the same bits as int8's
		return pick(addI8, mulI8, minU8, maxU8), 32
	case dtype.Int32:
		return pick(addI32, mulI32, minI32, maxI32), 32
	case dtype.Int64:
		return pick(addI64, nil, minI64, maxI64), 32
	case dtype.Uint32: // wrapped sums and products have the same bits as int32's
		return pick(addI32, mulI32, minU32, maxU32), 32
	case dtype.Uint64:
		return pick(addI64, nil, nil, nil), 32
	case dtype.Float32:
		return pick(addF32, mulF32, minF32, maxF32), 32
	case dtype.Float64:
		return pick(addF64, mulF64, minF64, maxF64), 32
	case dtype.Float16:
		if !cpu.X86.HasF16C {
			return nil, 0
		}
		return pick(addF16, mulF16, minF16, maxF16), 16
	case dtype.BFloat16:
		return pick(addBF16, mulBF16, minBF16, maxBF16), 32
	}
	return nil, 0
}

// reduceFast reduces the longest prefix of whole blocks with a vector
// kernel and returns its length in bytes; reduceGo does the rest.
func reduceFast(dst, src []byte, dt dtype.DType, op dtype.Op) int {
	k, block := kernel(dt, op)
	if k == nil {
		return 0
	}
	n := len(dst) &^ (block - 1)
	if n > 0 {
		k(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	}
	return n
}
