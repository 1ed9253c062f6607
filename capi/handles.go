package capi

import "sync"

// handles are the library's live communicators and registrations, by the
// handle the C caller holds (ncclComm_t, the ncclCommRegister handle).
// Both kinds come from one counter, so no handle names two things.
type handles struct {
	mu    sync.Mutex
	next  uintptr
	comms map[uintptr]*Comm
	regs  map[uintptr]bool // ncclCommRegister handles
}

// add registers c under a new handle.
func (t *handles) add(c *Comm) uintptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.next
	t.next++
	c.handle = h
	t.comms[h] = c
	return h
}

// remove forgets handle h.
func (t *handles) remove(h uintptr) {
	t.mu.Lock()
	delete(t.comms, h)
	t.mu.Unlock()
}

// get returns the communicator of h, nil when none.
func (t *handles) get(h uintptr) *Comm {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.comms[h]
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
