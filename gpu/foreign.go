package gpu

import (
	"fmt"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// Foreign memory and streams: device memory and CUstreams that another
// library made (cudaMalloc, a C caller's cudaStream_t), for the NCCL C
// library (package capi), which receives raw pointers and streams.

// wrapAllocation is Device.WrapAllocation.
func wrapAllocation(dv *Device, base uintptr, n int) (*Buffer, error) {
	if base == 0 || n <= 0 {
		return nil, fmt.Errorf("%s: wrap allocation %#x of %d bytes: want a non-null address and a positive size", dv, base, n)
	}
	p := cu.DevPtr(base)
	return &Buffer{dev: dv, ptr: p, n: n, own: &allocation{base: p, n: n, freed: true}}, nil
}

// wrapStream is Device.WrapStream.
func wrapStream(dv *Device, h uintptr) *Stream {
	return &Stream{dev: dv, h: cu.Stream(h), closed: true}
}
