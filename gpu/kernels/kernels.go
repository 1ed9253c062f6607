// Package kernels holds flexlink's CUDA kernels as PTX text, generated from
// reduce.cu beside it (see README.md) and embedded in the binary. Package gpu
// loads them with cuModuleLoadData; the driver JIT-compiles the PTX for the
// device it runs on.
package kernels

import _ "embed"

//go:generate sh -c "nvcc -ptx -arch=sm_90 -O3 -std=c++17 -o reduce_sm90.ptx reduce.cu && nvcc -ptx -arch=compute_80 -O3 -std=c++17 -o reduce_sm80.ptx reduce.cu"

// ReducePTX returns the reduction kernels' PTX for a device of compute
// capability major.minor: the sm_90 build for Hopper and later (the driver
// JITs it forward), the compute_80 build for Ampere and Ada, and ok=false
// below 8.0 (bfloat16 conversions need sm_80) or in a build tagged
// flexlink_nosm80 (Hopper-only binaries, 10 MB smaller) or flexlink_noptx
// (no PTX at all: scripts/gpu-build.sh).
func ReducePTX(major, minor int) (ptx []byte, ok bool) {
	switch {
	case major >= 9 && reduceSM90 != "":
		return []byte(reduceSM90), true
	case major == 8 && reduceSM80 != "":
		return []byte(reduceSM80), true
	}
	return nil, false
}

// Embedded reports whether this build carries any PTX: a build tagged
// flexlink_noptx (scripts/gpu-build.sh, whose binaries run on the PTX the
// GPU machine compiles, FLEXLINK_GPU_PTX) carries none.
func Embedded() bool { return reduceSM90 != "" }

// HasSM80 reports whether this build carries the compute_80 PTX.
func HasSM80() bool { return reduceSM80 != "" }
