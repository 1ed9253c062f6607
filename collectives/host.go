package collectives

import (
	"fmt"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/memcopy"
	"github.com/flexlink/flexlink/reduce"
)

// HostBuffer is host memory as a Buffer. Slice shares memory with the
// receiver (and caps the result so appends cannot spill into neighbours).
type HostBuffer []byte

// Len is the length in bytes.
func (b HostBuffer) Len() int { return len(b) }

// Slice returns b[off : off+n]; it panics when out of range.
func (b HostBuffer) Slice(off, n int) Buffer { return b[off : off+n : off+n] }

// Bytes returns the memory itself (not a copy).
func (b HostBuffer) Bytes() []byte { return b }

// Addr is the address of the first byte (0 for an empty nil buffer); the
// engine uses it to recognise in-place calls (see Addresser).
func (b HostBuffer) Addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Addresser is implemented by Buffers that can say where they start in
// their address space. Two buffers with the same Addr and Len are the same
// memory; the engine uses it to recognise NCCL-style in-place calls and to
// reject overlapping ones. A Buffer without it is always taken as a
// separate buffer unless it is the very same interface value.
type Addresser interface {
	Addr() uintptr
}

// HostMemory is the Memory of host buffers: Go allocation, copy, and the
// reduce package's kernels. It accepts HostBuffers only. The zero value
// allocates every scratch buffer anew; NewHostMemory's keeps freed scratch
// for the next call (see scratchCache).
type HostMemory struct{ cache *scratchCache }

// NewHostMemory returns a HostMemory that reuses freed scratch.
func NewHostMemory() HostMemory { return HostMemory{cache: newScratchCache()} }

// host is b's bytes; what and side name it in the error (joined only
// there: a call makes no string).
func host(b Buffer, what, side string) ([]byte, error) {
	h, ok := b.(HostBuffer)
	if !ok {
		return nil, fmt.Errorf("host memory: %s%s is a %T, not a HostBuffer: %w", what, side, b, errs.ErrNotSupported)
	}
	return h, nil
}

// hostPair is host of the destination and the source of an operation
// (what: "copy", "reduce").
func hostPair(dst, src Buffer, what string) (d, s []byte, err error) {
	if d, err = host(dst, what, " destination"); err != nil {
		return nil, nil, err
	}
	if s, err = host(src, what, " source"); err != nil {
		return nil, nil, err
	}
	return d, s, nil
}

// Alloc returns n bytes of scratch: zeroed when new, as its last user
// left it when reused from the cache (scratch is written before it is
// read).
func (h HostMemory) Alloc(n int) (Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("host memory: alloc of %d bytes", n)
	}
	if b := h.cache.get(n); b != nil {
		return HostBuffer(b), nil
	}
	return HostBuffer(make([]byte, n)), nil
}

// Free keeps b for a later Alloc of its size when the cache has room;
// otherwise the garbage collector takes it back.
func (h HostMemory) Free(b Buffer) {
	if hb, ok := b.(HostBuffer); ok {
		h.cache.put(hb)
	}
}

// Copy copies src into dst; the lengths must be equal.
func (HostMemory) Copy(dst, src Buffer) error {
	d, s, err := hostPair(dst, src, "copy")
	if err != nil {
		return err
	}
	if len(d) != len(s) {
		return fmt.Errorf("host memory: copy of %d bytes into %d: %w", len(s), len(d), errs.ErrMismatch)
	}
	memcopy.Copy(d, s) // non-temporal stores for large copies
	return nil
}

// Reduce sets dst = dst op src element-wise (reduce.Reduce).
func (HostMemory) Reduce(dst, src Buffer, dt dtype.DType, op dtype.Op) error {
	d, s, err := hostPair(dst, src, "reduce")
	if err != nil {
		return err
	}
	return reduce.Reduce(d, s, dt, op)
}

// Finish applies op's last step for n contributions (reduce.Finish).
func (HostMemory) Finish(dst Buffer, dt dtype.DType, op dtype.Op, n int) error {
	d, err := host(dst, "finish buffer", "")
	if err != nil {
		return err
	}
	return reduce.Finish(d, dt, op, n)
}
