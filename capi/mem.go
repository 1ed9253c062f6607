package capi

import (
	"sync"
	"unsafe"

	"flexlink/gpu"
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
	wrapped map[uintptr]*gpu.Buffer // foreign allocations by base address
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
// allocation that holds it (one Buffer per allocation base, so the direct
// plane's mapping cache sees the same allocation each time). The region is
// the one located for that argument: a non-root's broadcast passes the
// same pointer as send and recv, and only recv was located.
func (m *memRegistry) buffer(dv *gpu.Device, reg Region, p unsafe.Pointer, n int) (*gpu.Buffer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	whole := m.allocs[reg.Base]
	if whole == nil {
		whole = m.wrapped[reg.Base]
		if whole != nil && whole.Len() != reg.Size {
			whole = nil // freed and allocated again with another size
		}
	}
	if whole == nil {
		b, err := dv.WrapAllocation(reg.Base, reg.Size)
		if err != nil {
			return nil, fail(InvalidArgument, "%w", err)
		}
		m.wrapped[reg.Base] = b
		whole = b
	}
	return whole.Sub(int(uintptr(p)-reg.Base), n), nil
}
