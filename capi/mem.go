package capi

import (
	"sync"
	"sync/atomic"
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

// Identifier is a Memory that can say, for less than a Locate costs,
// whether p is device memory and the driver's id of the allocation that
// holds it (cmd/libnccl: one cuPointerGetAttributes of the memory type and
// CU_POINTER_ATTRIBUTE_BUFFER_ID). The library then asks Locate only about
// an allocation it has not seen: the rest of a Region (device, range, IPC)
// does not change while the allocation lives, and an id is never given to
// another allocation, so the id checked on every call is what keeps the
// cache right when memory is freed and allocated again at the same
// address.
type Identifier interface {
	Identify(p uintptr) (id uint64, device bool)
}

// idMemory is the Memory the library uses when the caller's is an
// Identifier: Locate answers from the registry's table by buffer id.
type idMemory struct {
	Memory
	id  Identifier
	reg *memRegistry
}

// Locate is one Identify for an allocation seen before, Identify and the
// caller's Locate for a new one.
func (m idMemory) Locate(p uintptr) (Region, bool) {
	id, dev := m.id.Identify(p)
	if !dev {
		return Region{}, false
	}
	if e := m.reg.lookup(id); e != nil && e.reg.contains(p) {
		return e.reg, true
	}
	r, ok := m.Memory.Locate(p)
	if ok && r.BufferID != 0 {
		m.reg.remember(r)
	}
	return r, ok
}

// contains reports whether p falls in r.
func (r Region) contains(p uintptr) bool { return p >= r.Base && p-r.Base < uintptr(r.Size) }

// maxAllocs bounds the allocations the registry remembers by id: past it
// the table starts again (a program that allocates without end, and frees
// what it allocated, never reuses an id).
const maxAllocs = 4096

// memRegistry is the device memory the library knows: ncclMemAlloc'd
// buffers by address, and every allocation a call used by the driver's
// buffer id. The table by id is read without a lock (a call's path); a
// new allocation replaces it whole, under mu.
type memRegistry struct {
	mu     sync.Mutex
	allocs map[uintptr]*gpu.Buffer // ncclMemAlloc'd buffers by address
	table  atomic.Pointer[map[uint64]*allocEntry]
}

// allocEntry is one allocation by buffer id: where it is, the Buffer that
// stands for it (made by the first device call on it) and the last ranges
// calls cut from it, so a call on the same pointer and size as an earlier
// one makes no Buffer.
type allocEntry struct {
	reg   Region
	whole atomic.Pointer[gpu.Buffer]
	subs  [4]atomic.Pointer[gpu.Buffer]
	next  atomic.Uint32
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

// lookup is the allocation of buffer id, nil when unknown (or id is 0).
func (m *memRegistry) lookup(id uint64) *allocEntry {
	if id == 0 {
		return nil
	}
	if t := m.table.Load(); t != nil {
		return (*t)[id]
	}
	return nil
}

// remember records the allocation r (r.BufferID != 0) and returns its
// entry. Every allocation known that overlaps it is dead (two live
// allocations never share an address) and is dropped.
func (m *memRegistry) remember(r Region) *allocEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var old map[uint64]*allocEntry
	if t := m.table.Load(); t != nil {
		old = *t
	}
	if e := old[r.BufferID]; e != nil && e.reg == r {
		return e
	}
	t := make(map[uint64]*allocEntry, len(old)+1)
	if len(old) < maxAllocs {
		for id, e := range old {
			if id != r.BufferID && !(e.reg.Base < r.Base+uintptr(r.Size) && r.Base < e.reg.Base+uintptr(e.reg.Size)) {
				t[id] = e
			}
		}
	}
	e := &allocEntry{reg: r}
	t[r.BufferID] = e
	m.table.Store(&t)
	return e
}

// buffer turns a caller's device pointer p, located in reg, into a
// gpu.Buffer: a range of an ncclMemAlloc'd buffer, or of the foreign
// allocation that holds it. An allocation is known by the driver's
// buffer id, checked on every call, never by address and size: one Buffer
// per live allocation, so the direct plane's mapping cache (fabric/nvlink
// Window, keyed by the Buffer's allocation) sees the same allocation each
// time, and memory freed and allocated again at the same address (PyTorch's
// caching allocator after empty_cache) is a new Buffer, which the plane
// exports anew and whose peers drop their mapping of the old one. The
// region is the one located for that argument: a non-root's broadcast
// passes the same pointer as send and recv, and only recv was located.
// An allocation seen before costs no lock and, for a range used before, no
// allocation.
func (m *memRegistry) buffer(dv *gpu.Device, reg Region, p unsafe.Pointer, n int) (*gpu.Buffer, error) {
	if reg.BufferID == 0 {
		m.mu.Lock()
		whole := m.allocs[reg.Base]
		m.mu.Unlock()
		if whole == nil {
			return nil, fail(InvalidArgument, "device buffer %p: the CUDA driver gives no buffer id for its allocation (%#x, %d bytes), so flexlink cannot tell it from memory freed and allocated again at the same address", p, reg.Base, reg.Size)
		}
		return whole.Sub(int(uintptr(p)-reg.Base), n), nil
	}
	e := m.lookup(reg.BufferID)
	if e == nil || e.reg != reg {
		e = m.remember(reg)
	}
	whole := e.whole.Load()
	if whole == nil {
		var err error
		if whole, err = m.wrap(dv, e); err != nil {
			return nil, err
		}
	}
	return e.sub(whole, uintptr(p), n), nil
}

// wrap makes the Buffer of e's allocation once: the ncclMemAlloc'd one at
// its address, else a wrapped foreign allocation.
func (m *memRegistry) wrap(dv *gpu.Device, e *allocEntry) (*gpu.Buffer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := e.whole.Load(); b != nil {
		return b, nil
	}
	b := m.allocs[e.reg.Base]
	if b == nil || b.Len() != e.reg.Size {
		var err error
		if b, err = dv.WrapAllocation(e.reg.Base, e.reg.Size); err != nil {
			return nil, fail(InvalidArgument, "%w", err)
		}
	}
	e.whole.Store(b)
	return b, nil
}

// sub is whole's n bytes at address p, one of the last ranges cut when it
// is the same.
func (e *allocEntry) sub(whole *gpu.Buffer, p uintptr, n int) *gpu.Buffer {
	for i := range e.subs {
		if b := e.subs[i].Load(); b != nil && b.Ptr() == p && b.Len() == n {
			return b
		}
	}
	b := whole.Sub(int(p-whole.Ptr()), n)
	e.subs[e.next.Add(1)%uint32(len(e.subs))].Store(b)
	return b
}
