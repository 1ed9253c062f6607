//go:build !purego

package reduce

import (
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/flexlink/flexlink/dtype"
)

// TestVectorKernelsUsed makes sure Reduce really takes the vector kernels on
// CPUs that have the features, so the oracle sweep covers the assembly and
// not only the Go loops; on CPUs without AVX2 it checks that no kernel
// runs.
func TestVectorKernelsUsed(t *testing.T) {
	for _, dt := range dtype.All() {
		for _, op := range dtype.Ops() {
			noKernel := dt.IsFloat8() || (dt == dtype.Int64 || dt == dtype.Uint64) && op == dtype.Prod ||
				dt == dtype.Uint64 && (op == dtype.Min || op == dtype.Max)
			want := cpu.X86.HasAVX2 && !noKernel && (dt != dtype.Float16 || cpu.X86.HasF16C)
			dst, src := make([]byte, 4096+dt.Size()), make([]byte, 4096+dt.Size())
			n := reduceFast(dst, src, dt, op)
			if want && n != 4096 || !want && n != 0 {
				t.Errorf("%s %s: vector prefix %d bytes of %d, want vector kernel %v", dt, op, n, len(dst), want)
			}
		}
	}
}

// TestFinishKernelsUsed does the same for Finish's float division.
func TestFinishKernelsUsed(t *testing.T) {
	for _, dt := range dtype.All() {
		want := cpu.X86.HasAVX2 && dt.IsFloat() && !dt.IsFloat8() && (dt != dtype.Float16 || cpu.X86.HasF16C)
		dst := make([]byte, 4096+dt.Size())
		n := finishFast(dst, dt, 3)
		if want && n != 4096 || !want && n != 0 {
			t.Errorf("%s: vector prefix %d bytes of %d, want vector kernel %v", dt, n, len(dst), want)
		}
	}
}
