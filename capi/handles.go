package capi

import (
	"sync"
	"sync/atomic"
)

// handles are the library's live communicators and registrations, by the
// handle the C caller holds (ncclComm_t, the ncclCommRegister handle).
// Both kinds come from one counter, so no handle names two things. Every
// call looks its communicator up, so that takes no lock: the table of
// communicators is replaced whole (under mu) when one is added or
// removed, which is rare.
type handles struct {
	mu    sync.Mutex
	next  uintptr
	comms atomic.Pointer[map[uintptr]*Comm]
	regs  map[uintptr]bool // ncclCommRegister handles
}

// newHandles returns an empty table; handles start at 1.
func newHandles() handles {
	return handles{next: 1, regs: map[uintptr]bool{}}
}

// setComm makes the table of communicators old with h set to c (nil:
// removed). Called under mu.
func (t *handles) setComm(h uintptr, c *Comm) {
	var old map[uintptr]*Comm
	if m := t.comms.Load(); m != nil {
		old = *m
	}
	m := make(map[uintptr]*Comm, len(old)+1)
	for k, v := range old {
		if k != h {
			m[k] = v
		}
	}
	if c != nil {
		m[h] = c
	}
	t.comms.Store(&m)
}

// add registers c under a new handle.
func (t *handles) add(c *Comm) uintptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.next
	t.next++
	c.handle = h
	t.setComm(h, c)
	return h
}

// remove forgets handle h.
func (t *handles) remove(h uintptr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.get(h) != nil {
		t.setComm(h, nil)
	}
}

// get returns the communicator of h, nil when none.
func (t *handles) get(h uintptr) *Comm {
	if m := t.comms.Load(); m != nil {
		return (*m)[h]
	}
	return nil
}

// comm looks up a handle for fn. NULL and handles never issued or already
// destroyed fail with ncclInvalidArgument.
func (t *handles) comm(h uintptr, fn string) (*Comm, error) {
	if h == 0 {
		return nil, fail(InvalidArgument, "%s: comm is NULL", fn)
	}
	c := t.get(h)
	if c == nil {
		return nil, fail(InvalidArgument, "%s: comm %#x is not a live communicator (never created, or already destroyed)", fn, h)
	}
	return c, nil
}

// register returns a new registration handle.
func (t *handles) register() uintptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	reg := t.next
	t.next++
	t.regs[reg] = true
	return reg
}

// deregister forgets registration reg and reports whether it was live.
func (t *handles) deregister(reg uintptr) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.regs[reg] {
		return false
	}
	delete(t.regs, reg)
	return true
}
