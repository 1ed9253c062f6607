//go:build !purego

package reduce

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/flexlink/flexlink/dtype"
)

// Division kernels in finish_amd64.s: divide the elements in n bytes at dst
// by d, n a multiple of the block size (16 bytes for float16, 32 for the
// others).

//go:noescape
func divF32(dst *byte, n int, d float32)

//go:noescape
func divF64(dst *byte, n int, d float64)

//go:noescape
func divF16(dst *byte, n int, d float32)

//go:noescape
func divBF16(dst *byte, n int, d float32)

// finishFast divides the longest prefix of whole blocks by n with a vector
// kernel and returns its length in bytes; finishAvg does the rest. Only the
// float types have kernels (AVX2 has no integer division).
func finishFast(dst []byte, dt dtype.DType, n int) int {
	if !cpu.X86.HasAVX2 {
		return 0
	}
	block := 32
	if dt == dtype.Float16 {
		block = 16
	}
	m := len(dst) &^ (block - 1)
	if m == 0 {
		return 0
	}
	p := unsafe.SliceData(dst)
	switch dt {
	case dtype.Float32:
		divF32(p, m, float32(n))
	case dtype.Float64:
		divF64(p, m, float64(n))
	case dtype.Float16:
		if !cpu.X86.HasF16C {
			return 0
		}
		divF16(p, m, float32(n))
	case dtype.BFloat16:
		divBF16(p, m, float32(n))
	default:
		return 0
	}
	return m
}
