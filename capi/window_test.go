package capi

import (
	"strings"
	"testing"
)

// TestWindows checks ncclCommWindowRegister's bookkeeping: a window is a
// new non-zero handle, distinct from every communicator and registration
// handle, remembers its buffer (ncclWinGetUserPtr), belongs to the
// communicator it was registered on, and is gone once deregistered.
func TestWindows(t *testing.T) {
	l, hs := hostLib(t, 2)
	var w Windows
	a, err := w.RegisterWindow(l, hs[0], 0x10000, 4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.RegisterWindow(l, hs[0], 0x20000, 8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := l.Register(hs[0], 0x30000, 64)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uintptr]string{hs[0]: "comm 0", hs[1]: "comm 1", reg: "registration"}
	for _, h := range []uintptr{a, b} {
		if h == 0 || seen[h] != "" {
			t.Fatalf("window handle %#x: zero or already %s", h, seen[h])
		}
		seen[h] = "window"
	}
	for _, tc := range []struct {
		win  uintptr
		want uintptr
	}{{a, 0x10000}, {b, 0x20000}} {
		if p, err := w.UserPtr(l, hs[0], tc.win); err != nil || p != tc.want {
			t.Errorf("UserPtr(%#x) = %#x, %v; want %#x", tc.win, p, err, tc.want)
		}
	}

	bad := []struct {
		name string
		err  func() error
		want string
	}{
		{"NULL buffer", func() error { _, err := w.RegisterWindow(l, hs[0], 0, 64, 0); return err }, "non-null buffer"},
		{"zero size", func() error { _, err := w.RegisterWindow(l, hs[0], 0x1000, 0, 0); return err }, "positive size"},
		{"NULL comm", func() error { _, err := w.RegisterWindow(l, 0, 0x1000, 64, 0); return err }, "comm is NULL"},
		{"dead comm", func() error { _, err := w.RegisterWindow(l, 0x7777777, 0x1000, 64, 0); return err }, "not a live communicator"},
		{"window of another comm", func() error { return w.DeregisterWindow(l, hs[1], a) }, "registered on communicator"},
		{"user pointer through another comm", func() error { _, err := w.UserPtr(l, hs[1], a); return err }, "registered on communicator"},
		{"NULL window", func() error { return w.DeregisterWindow(l, hs[0], 0) }, "window is NULL"},
		{"a registration is not a window", func() error { return w.DeregisterWindow(l, hs[0], reg) }, "not a live window"},
	}
	for _, tc := range bad {
		err := tc.err()
		if r := ResultOf(err); r != InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (%v), want ncclInvalidArgument mentioning %q", tc.name, r, err, tc.want)
		}
	}

	if err := w.DeregisterWindow(l, hs[0], a); err != nil {
		t.Fatal(err)
	}
	if err := w.DeregisterWindow(l, hs[0], a); ResultOf(err) != InvalidArgument {
		t.Errorf("second deregister: %v, want ncclInvalidArgument", err)
	}
	if _, err := w.UserPtr(l, hs[0], a); ResultOf(err) != InvalidArgument {
		t.Errorf("UserPtr after deregister: %v, want ncclInvalidArgument", err)
	}
	if p, err := w.UserPtr(l, hs[0], b); err != nil || p != 0x20000 {
		t.Errorf("the other window: %#x, %v", p, err)
	}
	if err := l.Deregister(hs[0], reg); err != nil {
		t.Errorf("the registration outlives the windows: %v", err)
	}
}
