package capi

import "sync"

// Window is one ncclCommWindowRegister registration: flexlink keeps it as
// bookkeeping only. Collectives on the buffer run as on any device buffer
// (mapped when a call first uses it), so a window changes no result; what
// NCCL builds on windows beyond that (symmetric kernels, the device API,
// one-sided puts and signals) flexlink does not serve.
type Window struct {
	Comm  uintptr // the communicator's handle
	Ptr   uintptr // the registered buffer, as the caller passed it
	Size  int
	Flags int // NCCL_WIN_* as passed (kept, not acted on)
}

// Windows are the live windows of a Library by handle. A window handle
// comes from the library's handle counter (as ncclCommRegister's), so no
// handle names both a window and a communicator. Safe for concurrent use.
type Windows struct {
	mu   sync.Mutex
	wins map[uintptr]Window
}

// RegisterWindow is ncclCommWindowRegister(comm h, buff p, size n, flags):
// it checks the communicator and the buffer and returns a new, non-zero
// window handle. It may be called inside ncclGroupStart/End (nccl-tests
// -R 2 does): it does its work at once.
func (w *Windows) RegisterWindow(l *Library, h, p uintptr, n, flags int) (uintptr, error) {
	const fn = "ncclCommWindowRegister"
	if _, err := l.handles.comm(h, fn); err != nil {
		return 0, err
	}
	if p == 0 || n <= 0 {
		return 0, fail(InvalidArgument, "%s: buffer %#x of %d bytes: want a non-null buffer and a positive size", fn, p, n)
	}
	win := l.handles.register()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wins == nil {
		w.wins = map[uintptr]Window{}
	}
	w.wins[win] = Window{Comm: h, Ptr: p, Size: n, Flags: flags}
	return win, nil
}

// lookup returns the window win of communicator h for fn.
func (w *Windows) lookup(l *Library, fn string, h, win uintptr) (Window, error) {
	if _, err := l.handles.comm(h, fn); err != nil {
		return Window{}, err
	}
	if win == 0 {
		return Window{}, fail(InvalidArgument, "%s: window is NULL", fn)
	}
	w.mu.Lock()
	got, ok := w.wins[win]
	w.mu.Unlock()
	if !ok {
		return Window{}, fail(InvalidArgument, "%s: window %#x is not a live window (never registered, or already deregistered)", fn, win)
	}
	if got.Comm != h {
		return Window{}, fail(InvalidArgument, "%s: window %#x was registered on communicator %#x, not %#x", fn, win, got.Comm, h)
	}
	return got, nil
}

// DeregisterWindow is ncclCommWindowDeregister: it forgets win, which must
// be a live window of communicator h.
func (w *Windows) DeregisterWindow(l *Library, h, win uintptr) error {
	if _, err := w.lookup(l, "ncclCommWindowDeregister", h, win); err != nil {
		return err
	}
	w.mu.Lock()
	delete(w.wins, win)
	w.mu.Unlock()
	l.handles.deregister(win)
	return nil
}

// UserPtr is ncclWinGetUserPtr: the buffer win was registered with.
func (w *Windows) UserPtr(l *Library, h, win uintptr) (uintptr, error) {
	got, err := w.lookup(l, "ncclWinGetUserPtr", h, win)
	return got.Ptr, err
}

// Window returns the live window win (ok false when none), for the
// device-API queries that take only a window.
func (w *Windows) Window(win uintptr) (Window, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	got, ok := w.wins[win]
	return got, ok
}
