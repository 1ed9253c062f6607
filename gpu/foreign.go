package gpu

import (
	"fmt"

	"flexlink/gpu/internal/cu"
)

// Foreign memory and streams: device memory and CUstreams that another
// library made (cudaMalloc, a C caller's cudaStream_t), for the NCCL C
// library (package capi), which receives raw pointers and streams.

// WrapAllocation returns a Buffer for the allocation of n bytes at device
// address base on dv, made elsewhere (cudaMalloc; cuMemGetAddressRange
// gives base and n for any pointer inside it). Cut the caller's ranges from
// it with Sub; keep one Buffer per allocation, since the direct plane caches
// peers' mappings per allocation object (SameAllocation). Its Free fails
// with errs.ErrClosed: the memory belongs to whoever allocated it, and must
// outlive every collective that uses it.
func (dv *Device) WrapAllocation(base uintptr, n int) (*Buffer, error) {
	if base == 0 || n <= 0 {
		return nil, fmt.Errorf("%s: wrap allocation %#x of %d bytes: want a non-null address and a positive size", dv, base, n)
	}
	p := cu.DevPtr(base)
	return &Buffer{dev: dv, ptr: p, n: n, own: &allocation{base: p, n: n, freed: true}}, nil
}

// WrapStream returns a Stream for the CUstream (cudaStream_t) h that was
// created on dv elsewhere; 0 is the legacy default stream, and the
// per-thread default stream's handle works too. Its Close fails with
// errs.ErrClosed: the stream belongs to its creator.
func (dv *Device) WrapStream(h uintptr) *Stream {
	return &Stream{dev: dv, h: cu.Stream(h), closed: true}
}
