package nvlink

import (
	"encoding/binary"
	"fmt"

	"github.com/flexlink/flexlink/gpu"
)

// User buffers cross processes as descriptors: which allocation (an id the
// owner gives it), where in it, how long, and the allocation's IPC handle.
// CUDA IPC exports whole allocations only, and opening a handle costs tens
// of microseconds plus a mapping, so both sides cache per allocation:
//
//   - the owner keeps every allocation it has described, keyed by the
//     allocation object (gpu.Buffer.SameAllocation), with its id and
//     handle. Holding the whole Buffer keeps that object alive, so a freed
//     and re-made allocation at the same address is a new object and gets a
//     new id: a stale mapping is never reused for it.
//   - each peer keeps its mapping per (owner rank, id) and opens a handle
//     the first time it sees an id.
//
// A descriptor travels in every call's handshake (DescBytes per buffer),
// so the cache needs no invalidation protocol: it names the allocation's
// address range at the owner, and two live allocations of one process
// never overlap, so an allocation described there that overlaps one
// described before proves the old one freed. Both sides then drop the
// old one: the owner its export, each peer its mapping (closed before the
// new handle is opened). Other mappings live until Close.

// DescBytes is the encoded size of a Desc.
const DescBytes = 5*8 + gpu.IPCHandleSize

// Desc describes a range of another rank's device memory.
type Desc struct {
	id       uint64 // allocation id at the owner; 0: no buffer
	off, n   int    // range within the allocation, bytes
	allocLen int    // the allocation's length (OpenIPCBuffer needs it)
	base     uint64 // the allocation's address at the owner
	handle   []byte // IPC handle of the allocation
}

// Put encodes d into b[:DescBytes].
func (d Desc) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], d.id)
	le.PutUint64(b[8:], uint64(d.off))
	le.PutUint64(b[16:], uint64(d.n))
	le.PutUint64(b[24:], uint64(d.allocLen))
	le.PutUint64(b[32:], d.base)
	copy(b[40:DescBytes], d.handle)
}

// Empty reports whether d describes no buffer (Describe of nil).
func (d Desc) Empty() bool { return d.id == 0 }

// GetDesc decodes the descriptor at the start of b (at least DescBytes
// long). The result's handle aliases b.
func GetDesc(b []byte) Desc {
	le := binary.LittleEndian
	return Desc{
		id: le.Uint64(b[0:]), off: int(le.Uint64(b[8:])), n: int(le.Uint64(b[16:])),
		allocLen: int(le.Uint64(b[24:])), base: le.Uint64(b[32:]), handle: b[40:DescBytes],
	}
}

// export is one allocation this rank has described to peers.
type export struct {
	whole  *gpu.Buffer
	id     uint64
	handle []byte
}

// mapped is a peer's allocation opened here, with its range at the owner.
type mapped struct {
	buf  *gpu.Buffer
	base uint64
	n    int
}

// Window holds both sides of the descriptor cache of one rank: the
// allocations it has exported and the peers' allocations it has mapped. It
// is not safe for concurrent use (the data plane uses it under its
// communicator's run lock).
type Window struct {
	dev      *gpu.Device
	nextID   uint64
	exports  map[uintptr][]*export // by allocation base address
	opened   []map[uint64]mapped   // by owner rank, then id
	peerHost func(r int) string    // names the owner in errors
}

// NewWindow makes the cache for a rank among n on dev; peerHost names a
// rank's host in errors.
func NewWindow(dev *gpu.Device, n int, peerHost func(int) string) *Window {
	c := &Window{dev: dev, exports: map[uintptr][]*export{}, opened: make([]map[uint64]mapped, n),
		peerHost: peerHost}
	for r := range c.opened {
		c.opened[r] = map[uint64]mapped{}
	}
	return c
}

// Describe returns b's descriptor, exporting its allocation the first
// time. A nil b gives the empty descriptor, which Open refuses.
func (c *Window) Describe(b *gpu.Buffer) (Desc, error) {
	if b == nil {
		return Desc{}, nil
	}
	whole, off := b.Allocation()
	var e *export
	for _, x := range c.exports[whole.Ptr()] {
		if x.whole.SameAllocation(b) {
			e = x
		}
	}
	if e == nil {
		h, err := whole.IPCHandle()
		if err != nil {
			return Desc{}, fmt.Errorf("export buffer for peers: %w", err)
		}
		c.forgetOverlapping(whole)
		c.nextID++
		e = &export{whole: whole, id: c.nextID, handle: h}
		c.exports[whole.Ptr()] = append(c.exports[whole.Ptr()], e)
	}
	return Desc{id: e.id, off: off, n: b.Len(), allocLen: whole.Len(), base: uint64(whole.Ptr()), handle: e.handle}, nil
}

// forgetOverlapping drops the exports of allocations that overlap whole
// (a new, live allocation): they were freed.
func (c *Window) forgetOverlapping(whole *gpu.Buffer) {
	lo, hi := whole.Ptr(), whole.Ptr()+uintptr(whole.Len())
	for base, es := range c.exports {
		kept := es[:0]
		for _, x := range es {
			if x.whole.SameAllocation(whole) || base >= hi || base+uintptr(x.whole.Len()) <= lo {
				kept = append(kept, x)
			}
		}
		if len(kept) == 0 {
			delete(c.exports, base)
		} else {
			c.exports[base] = kept
		}
	}
}

// Open returns owner's buffer that d describes, mapped into this device,
// opening the allocation's handle the first time. The buffer stays mapped
// until Close; the caller must not free it.
func (c *Window) Open(owner int, d Desc) (*gpu.Buffer, error) {
	if d.id == 0 {
		return nil, fmt.Errorf("rank %d on %s sent no buffer where one is needed", owner, c.peerHost(owner))
	}
	if owner < 0 || owner >= len(c.opened) {
		return nil, fmt.Errorf("descriptor from rank %d of %d", owner, len(c.opened))
	}
	mp, ok := c.opened[owner][d.id]
	if !ok {
		if err := c.closeOverlapping(owner, d); err != nil {
			return nil, err
		}
		b, err := c.dev.OpenIPCBuffer(d.handle, d.allocLen)
		if err != nil {
			return nil, fmt.Errorf("map rank %d's buffer (on %s) over nvlink: %w", owner, c.peerHost(owner), err)
		}
		mp = mapped{buf: b, base: d.base, n: d.allocLen}
		c.opened[owner][d.id] = mp
	}
	m := mp.buf
	if d.off < 0 || d.n < 0 || d.off+d.n > m.Len() {
		return nil, fmt.Errorf("rank %d on %s described bytes [%d,%d) of a %d-byte allocation", owner, c.peerHost(owner), d.off, d.off+d.n, m.Len())
	}
	return m.Sub(d.off, d.n), nil
}

// closeOverlapping unmaps owner's allocations whose range at the owner
// overlaps the one d describes (new there, so they were freed): the peer's
// memory was given back, and a stale mapping must never be used again.
func (c *Window) closeOverlapping(owner int, d Desc) error {
	lo, hi := d.base, d.base+uint64(d.allocLen)
	for id, m := range c.opened[owner] {
		if m.base < hi && lo < m.base+uint64(m.n) {
			delete(c.opened[owner], id)
			if err := m.buf.Free(); err != nil {
				return fmt.Errorf("unmap rank %d's freed buffer (on %s): %w", owner, c.peerHost(owner), err)
			}
		}
	}
	return nil
}

// Close unmaps every peer allocation and forgets the exports; it returns
// the first error.
func (c *Window) Close() error {
	var first error
	for _, m := range c.opened {
		for id, b := range m {
			if err := b.buf.Free(); err != nil && first == nil {
				first = err
			}
			delete(m, id)
		}
	}
	c.exports = map[uintptr][]*export{}
	return first
}
