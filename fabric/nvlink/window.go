package nvlink

import (
	"encoding/binary"
	"fmt"

	"flexlink/gpu"
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
// so the cache needs no invalidation protocol; mappings live until Close.

// DescBytes is the encoded size of a Desc.
const DescBytes = 4*8 + gpu.IPCHandleSize

// Desc describes a range of another rank's device memory.
type Desc struct {
	id       uint64 // allocation id at the owner; 0: no buffer
	off, n   int    // range within the allocation, bytes
	allocLen int    // the allocation's length (OpenIPCBuffer needs it)
	handle   []byte // IPC handle of the allocation
}

// Put encodes d into b[:DescBytes].
func (d Desc) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], d.id)
	le.PutUint64(b[8:], uint64(d.off))
	le.PutUint64(b[16:], uint64(d.n))
	le.PutUint64(b[24:], uint64(d.allocLen))
	copy(b[32:DescBytes], d.handle)
}

// Empty reports whether d describes no buffer (Describe of nil).
func (d Desc) Empty() bool { return d.id == 0 }

// GetDesc decodes the descriptor at the start of b (at least DescBytes
// long). The result's handle aliases b.
func GetDesc(b []byte) Desc {
	le := binary.LittleEndian
	return Desc{
		id: le.Uint64(b[0:]), off: int(le.Uint64(b[8:])), n: int(le.Uint64(b[16:])),
		allocLen: int(le.Uint64(b[24:])), handle: b[32:DescBytes],
	}
}

// export is one allocation this rank has described to peers.
type export struct {
	whole  *gpu.Buffer
	id     uint64
	handle []byte
}

// Window holds both sides of the descriptor cache of one rank: the
// allocations it has exported and the peers' allocations it has mapped. It
// is not safe for concurrent use (the data plane uses it under its
// communicator's run lock).
type Window struct {
	dev      *gpu.Device
	nextID   uint64
	exports  map[uintptr][]*export    // by allocation base address
	opened   []map[uint64]*gpu.Buffer // by owner rank, then id
	peerHost func(r int) string       // names the owner in errors
}

// NewWindow makes the cache for a rank among n on dev; peerHost names a
// rank's host in errors.
func NewWindow(dev *gpu.Device, n int, peerHost func(int) string) *Window {
	c := &Window{dev: dev, exports: map[uintptr][]*export{}, opened: make([]map[uint64]*gpu.Buffer, n),
		peerHost: peerHost}
	for r := range c.opened {
		c.opened[r] = map[uint64]*gpu.Buffer{}
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
		c.nextID++
		e = &export{whole: whole, id: c.nextID, handle: h}
		c.exports[whole.Ptr()] = append(c.exports[whole.Ptr()], e)
	}
	return Desc{id: e.id, off: off, n: b.Len(), allocLen: whole.Len(), handle: e.handle}, nil
}

// Open returns owner's buffer that d describes, mapped into this device,
// opening the allocation's handle the first time. The buffer stays mapped
// until Close; the caller must not free it.
func (c *Window) Open(owner int, d Desc) (*gpu.Buffer, error) {
	if d.id == 0 {
		return nil, fmt.Errorf("rank %d on %s sent no buffer where one is needed", owner, c.peerHost(owner))
	}
	m := c.opened[owner][d.id]
	if m == nil {
		var err error
		if m, err = c.dev.OpenIPCBuffer(d.handle, d.allocLen); err != nil {
			return nil, fmt.Errorf("map rank %d's buffer (on %s) over nvlink: %w", owner, c.peerHost(owner), err)
		}
		c.opened[owner][d.id] = m
	}
	if d.off < 0 || d.n < 0 || d.off+d.n > m.Len() {
		return nil, fmt.Errorf("rank %d on %s described bytes [%d,%d) of a %d-byte allocation", owner, c.peerHost(owner), d.off, d.off+d.n, m.Len())
	}
	return m.Sub(d.off, d.n), nil
}

// Close unmaps every peer allocation and forgets the exports; it returns
// the first error.
func (c *Window) Close() error {
	var first error
	for _, m := range c.opened {
		for id, b := range m {
			if err := b.Free(); err != nil && first == nil {
				first = err
			}
			delete(m, id)
		}
	}
	c.exports = map[uintptr][]*export{}
	return first
}
