package gpu

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/mem"
)

// Buffer is a range of device memory on one GPU: a whole allocation (from
// Device.Alloc or Device.OpenIPCBuffer) or a sub-range of one (Sub, Slice).
// It implements mem.Buffer. Sub-ranges share the allocation; only
// the whole allocation is freed.
type Buffer struct {
	dev *Device
	ptr cu.DevPtr
	n   int
	own *allocation
}

// allocation is what Free gives back; all Buffers cut from it point to it.
type allocation struct {
	base cu.DevPtr
	n    int
	ipc  bool // opened from an IPC handle: Free closes the mapping

	mu    sync.Mutex
	freed bool
}

var _ mem.Buffer = (*Buffer)(nil)

// allocBuffer is Device.Alloc.
func allocBuffer(dv *Device, n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%s: alloc %d bytes: size must be positive", dv, n)
	}
	var p cu.DevPtr
	err := dv.do(func(api cu.API) (e error) { p, e = api.MemAlloc(uint64(n)); return })
	if err != nil {
		return nil, fmt.Errorf("%s: alloc %s: %w", dv, byteSize(n), err)
	}
	return &Buffer{dev: dv, ptr: p, n: n, own: &allocation{base: p, n: n}}, nil
}

// Ptr is the device address (a CUdeviceptr; unified addressing makes it
// unique across the process's devices).
func (b *Buffer) Ptr() uintptr { return uintptr(b.ptr) }

// Len is the length in bytes.
func (b *Buffer) Len() int { return b.n }

// Device is the GPU the memory lives on.
func (b *Buffer) Device() *Device { return b.dev }

// Sub returns the range [off, off+n) of b, sharing its memory. It panics
// when the range does not fit (a programming error, like slicing).
func (b *Buffer) Sub(off, n int) *Buffer {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("gpu: Sub(%d, %d) of a %d-byte buffer", off, n, b.n))
	}
	return &Buffer{dev: b.dev, ptr: b.ptr + cu.DevPtr(off), n: n, own: b.own}
}

// Slice is Sub for mem.Buffer.
func (b *Buffer) Slice(off, n int) mem.Buffer { return b.Sub(off, n) }

// whole reports whether b is its entire allocation.
func (b *Buffer) whole() bool { return b.ptr == b.own.base && b.n == b.own.n }

// Free gives the allocation back (or, for a buffer opened from an IPC
// handle, unmaps it). Only the whole allocation can be freed; a second Free
// returns an error wrapping errs.ErrClosed. Work still queued on a stream
// that uses the memory must have completed.
func (b *Buffer) Free() error {
	if !b.whole() {
		return fmt.Errorf("%s: free %#x: a sub-range of the allocation at %#x; free that one", b.dev, b.ptr, b.own.base)
	}
	b.own.mu.Lock()
	defer b.own.mu.Unlock()
	if b.own.freed {
		return fmt.Errorf("%s: free %#x: %w", b.dev, b.ptr, errs.ErrClosed)
	}
	err := b.dev.do(func(api cu.API) error {
		if b.own.ipc {
			return api.IpcCloseMemHandle(b.ptr)
		}
		return api.MemFree(b.ptr)
	})
	if err != nil {
		return fmt.Errorf("%s: free %#x: %w", b.dev, b.ptr, err)
	}
	b.own.freed = true
	return nil
}

// HostMem is page-locked host memory that every device of the driver can
// copy to and from at full PCIe speed: allocated by the driver (AllocHost)
// or an existing mapping registered with it (RegisterHost), both with the
// PORTABLE and DEVICEMAP flags.
type HostMem struct {
	dev        *Device // context it was made in (any works: it is portable)
	p          unsafe.Pointer
	b          []byte
	registered bool

	mu    sync.Mutex
	freed bool
}

// allocHost is Device.AllocHost.
func allocHost(dv *Device, n int) (*HostMem, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%s: alloc host %d bytes: size must be positive", dv, n)
	}
	var p unsafe.Pointer
	err := dv.do(func(api cu.API) (e error) {
		p, e = api.MemHostAlloc(uint64(n), cu.HostAllocPortable|cu.HostAllocDeviceMap)
		return
	})
	if err != nil {
		return nil, fmt.Errorf("%s: alloc pinned host %s: %w", dv, byteSize(n), err)
	}
	return &HostMem{dev: dv, p: p, b: unsafe.Slice((*byte)(p), n)}, nil
}

// registerHost is Device.RegisterHost.
func registerHost(dv *Device, b []byte) (*HostMem, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: register host memory: empty range", dv)
	}
	p := unsafe.Pointer(&b[0])
	err := dv.do(func(api cu.API) error {
		return api.MemHostRegister(p, uint64(len(b)), cu.HostRegisterPortable|cu.HostRegisterDeviceMap)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: register %s of host memory at %p: %w", dv, byteSize(len(b)), p, err)
	}
	return &HostMem{dev: dv, p: p, b: b, registered: true}, nil
}

// Bytes is the memory. It is valid until Free.
func (h *HostMem) Bytes() []byte { return h.b }

// Len is the length in bytes.
func (h *HostMem) Len() int { return len(h.b) }

// Free frees memory from AllocHost, or unregisters memory from RegisterHost
// (which leaves the mapping itself to its owner). A second Free returns an
// error wrapping errs.ErrClosed.
func (h *HostMem) Free() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.freed {
		return fmt.Errorf("%s: free host memory %p: %w", h.dev, h.p, errs.ErrClosed)
	}
	err := h.dev.do(func(api cu.API) error {
		if h.registered {
			return api.MemHostUnregister(h.p)
		}
		return api.MemFreeHost(h.p)
	})
	if err != nil {
		return fmt.Errorf("%s: free host memory %p: %w", h.dev, h.p, err)
	}
	h.freed = true
	return nil
}

// byteSize formats n for messages: "64 MiB", "1000 B".
func byteSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
