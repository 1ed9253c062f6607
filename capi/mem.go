package capi

import (
	"sync"
	"unsafe"

	"github.com/flexlink/flexlink/gpu"
)

// driverState is the CUDA driver, opened once on first need.
type driverState struct {
	mu   sync.Mutex
	drv  *gpu.Driver
	err  error
	done bool
}

// open opens the CUDA driver once; nil when the library has no Memory
// (no CUDA in the process) or the driver cannot be opened.
func (d *driverState) open(opt Options) (*gpu.Driver, error) {
	if opt.Memory == nil {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.done {
		open := opt.Driver
		if open == nil {
			open = gpu.Open
		}
		d.drv, d.err = open()
		d.done = true
	}
	return d.drv, d.err
}

// memRegistry is the device memory the library knows by address.
type memRegistry struct {
	mu      sync.Mutex
	allocs  map[uintptr]*gpu.Buffer // ncclMemAlloc'd buffers by address
	wrapped map[uintptr]wrapped     // foreign allocations by base address
}

// wrapped is a foreign allocation: the Buffer that stands for it and the
// driver's id of the allocation it stood for when it was made.
type wrapped struct {
	whole *gpu.Buffer
	id    uint64
}

// add records b, from ncclMemAlloc.
func (m *memRegistry) add(b *gpu.Buffer) {
	m.mu.Lock()
	m.allocs[b.Ptr()] = b
	m.mu.Unlock()
}

// take forgets and returns the ncclMemAlloc'd buffer at p, nil when none.
func (m *memRegistry) take(p uintptr) *gpu.Buffer {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.allocs[p]
	delete(m.allocs, p)
	return b
}

// buffer turns a caller's device pointer p, located in reg, into a
// gpu.Buffer: a range of an ncclMemAlloc'd buffer, or of the foreign
// allocation that holds it. A foreign allocation is known by the driver's
// buffer id, checked on every call, never by address and size: one Buffer
// per live allocation, so the direct plane's mapping cache (fabric/nvlink
// Window, keyed by the Buffer's allocation) sees the same allocation each
// time, and memory freed and allocated again at the same address (PyTorch's
// caching allocator after empty_cache) is a new Buffer, which the plane
// exports anew and whose peers drop their mapping of the old one. The
// region is the one located for that argument: a non-root's broadcast
// passes the same pointer as send and recv, and only recv was located.
func (m *memRegistry) buffer(dv *gpu.Device, reg Region, p unsafe.Pointer, n int) (*gpu.Buffer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	whole := m.allocs[reg.Base]
	if whole == nil {
		if reg.BufferID == 0 {
			return nil, fail(InvalidArgument, "device buffer %p: the CUDA driver gives no buffer id for its allocation (%#x, %d bytes), so flexlink cannot tell it from memory freed and allocated again at the same address", p, reg.Base, reg.Size)
		}
		w, ok := m.wrapped[reg.Base]
		if !ok || w.id != reg.BufferID || w.whole.Len() != reg.Size {
			// A new allocation: every one known that overlaps it is
			// dead (two live allocations never share an address).
			for base, o := range m.wrapped {
				if base < reg.Base+uintptr(reg.Size) && reg.Base < base+uintptr(o.whole.Len()) {
					delete(m.wrapped, base)
				}
			}
			b, err := dv.WrapAllocation(reg.Base, reg.Size)
			if err != nil {
				return nil, fail(InvalidArgument, "%w", err)
			}
			w = wrapped{whole: b, id: reg.BufferID}
			m.wrapped[reg.Base] = w
		}
		whole = w.whole
	}
	return whole.Sub(int(uintptr(p)-reg.Base), n), nil
}
