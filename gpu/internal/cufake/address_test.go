package cufake

import (
	"runtime"
	"testing"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// TestAddressesNeverOverlap: allocations and IPC mappings of every device
// resolve to themselves however many handles (streams, events, functions)
// the driver gave out in between. Device addresses used to take the
// driver-wide handle counter (device d, handle h at d<<40 + h<<28), so an
// allocation of device 0 made 4096 handles after one of device 1 got the
// same address, and writes through one reached the other (the 8-rank fake
// flag test's flaky hang: each device loads thousands of kernel entries).
func TestAddressesNeverOverlap(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := New(Config{Devices: 2})
	ctx := func(d int) {
		t.Helper()
		c, err := f.PrimaryCtxRetain(cu.Device(d))
		if err == nil {
			err = f.CtxSetCurrent(c)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	type mem struct {
		p   cu.DevPtr
		dev int
	}
	var all []mem
	alloc := func(d int, n uint64) cu.DevPtr {
		t.Helper()
		ctx(d)
		p, err := f.MemAlloc(n)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, mem{p, d})
		return p
	}
	p1 := alloc(1, 4096)
	h, err := f.IpcGetMemHandle(p1)
	if err != nil {
		t.Fatal(err)
	}
	for range 4000 {
		f.handle() // streams, events, functions made in between
	}
	for i := range 200 {
		alloc(0, uint64(1+i%3)<<20)
	}
	q, err := f.IpcOpenMemHandle(h, 0) // device 1's allocation mapped on device 0
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, mem{q, 0})
	seen := map[cu.DevPtr]bool{}
	for _, m := range all {
		if seen[m.p] {
			t.Fatalf("address %#x given out twice", uint64(m.p))
		}
		seen[m.p] = true
		n := 0
		for base, a := range f.mem.allocs {
			if m.p >= base && uint64(m.p-base) < uint64(len(a.data)) {
				n++
				if a.dev != m.dev {
					t.Errorf("%#x (device %d) lies in an allocation of device %d", uint64(m.p), m.dev, a.dev)
				}
			}
		}
		if n != 1 {
			t.Errorf("%#x lies in %d allocations, want 1", uint64(m.p), n)
		}
	}
}

// TestAddressSpaceUsedUp: a device whose address space is used up fails
// the allocation rather than handing out an address that is taken.
func TestAddressSpaceUsedUp(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := New(Config{Devices: 1, MemPerDevice: 1 << 50})
	c, err := f.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CtxSetCurrent(c); err != nil {
		t.Fatal(err)
	}
	f.mem.cursor[0] = devSpan - allocStep // one step left
	if _, err := f.MemAlloc(allocStep); err != nil {
		t.Fatalf("last step: %v", err)
	}
	if p, err := f.MemAlloc(1); err == nil {
		t.Fatalf("allocation at %#x past the device's address space", uint64(p))
	}
}
