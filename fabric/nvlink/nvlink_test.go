package nvlink

import (
	"bytes"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// fakeDevices opens n devices of the fake driver (host memory).
func fakeDevices(t *testing.T, n int) []*gpu.Device {
	t.Helper()
	drv, err := gpufake.Open(gpufake.Config{Devices: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	devs := make([]*gpu.Device, n)
	for i := range devs {
		if devs[i], err = drv.Device(i); err != nil {
			t.Fatal(err)
		}
	}
	return devs
}

// TestWindowRoundTrip: rank 0 describes ranges of its buffer, the
// descriptor crosses as bytes, and rank 1 maps it and reads what rank 0
// wrote there; a second range of the same allocation reuses the mapping.
func TestWindowRoundTrip(t *testing.T) {
	devs := fakeDevices(t, 2)
	host := func(int) string { return "fakehost" }
	w0, w1 := NewWindow(devs[0], 2, host), NewWindow(devs[1], 2, host)
	defer w0.Close()
	defer w1.Close()
	buf, err := devs[0].Alloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	want := make([]byte, buf.Len())
	for i := range want {
		want[i] = byte(i * 7)
	}
	s0, err := devs[0].NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()
	s1, err := devs[1].NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if err := s0.CopyHtoD(buf, want); err != nil {
		t.Fatal(err)
	}
	if err := s0.Synchronize(); err != nil {
		t.Fatal(err)
	}
	var first *gpu.Buffer
	for _, r := range []struct{ off, n int }{{0, 4096}, {12288, 20000}, {1<<16 - 100, 100}} {
		desc := wired(t, w0, buf.Sub(r.off, r.n))
		m, err := w1.Open(0, desc)
		if err != nil {
			t.Fatalf("open [%d,+%d): %v", r.off, r.n, err)
		}
		if m.Len() != r.n {
			t.Fatalf("open [%d,+%d): %d bytes", r.off, r.n, m.Len())
		}
		if first == nil {
			first = m
		} else if !first.SameAllocation(m) {
			t.Errorf("range [%d,+%d) of the same allocation was mapped again", r.off, r.n)
		}
		got := make([]byte, r.n)
		if err := s1.CopyDtoH(got, m); err != nil {
			t.Fatal(err)
		}
		if err := s1.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[r.off:r.off+r.n]) {
			t.Errorf("range [%d,+%d): peer read other bytes", r.off, r.n)
		}
	}
}

// TestWindowRefuses: no buffer, or a range past the allocation, is an
// error naming the owner, never a mapping.
func TestWindowRefuses(t *testing.T) {
	devs := fakeDevices(t, 2)
	w0 := NewWindow(devs[0], 2, func(int) string { return "hostA" })
	w1 := NewWindow(devs[1], 2, func(int) string { return "hostA" })
	defer w0.Close()
	defer w1.Close()
	buf, err := devs[0].Alloc(8192)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	empty, err := w0.Describe(nil)
	if err != nil {
		t.Fatal(err)
	}
	past := wired(t, w0, buf.Sub(4096, 4096))
	past.n = 8192
	for name, d := range map[string]Desc{"empty": empty, "past the end": past} {
		if b, err := w1.Open(0, d); err == nil || b != nil {
			t.Errorf("%s: opened %v", name, b)
		} else if !bytes.Contains([]byte(err.Error()), []byte("hostA")) {
			t.Errorf("%s: error %q does not name the owner's host", name, err)
		}
	}
}

// TestLanesJoin: Join waits only for the lanes used since the last join
// and clears them; the caller's stream then sees the lanes' copies.
func TestLanesJoin(t *testing.T) {
	devs := fakeDevices(t, 1)
	l, err := NewLanes(devs[0], 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Len() != 4 {
		t.Fatalf("%d lanes, want 4", l.Len())
	}
	s, err := devs[0].NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src, err := devs[0].Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := devs[0].Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	want := bytes.Repeat([]byte{0xa5}, 4096)
	if err := s.CopyHtoD(src, want); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := l.Use(2).CopyDtoD(dst, src); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < l.Len(); k++ {
		if l.Used(k) != (k == 2) {
			t.Errorf("lane %d used %v before the join", k, l.Used(k))
		}
	}
	if err := l.Join(s); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < l.Len(); k++ {
		if l.Used(k) {
			t.Errorf("lane %d still used after the join", k)
		}
	}
	got := make([]byte, 4096)
	if err := s.CopyDtoH(got, dst); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the caller's stream did not see the lane's copy")
	}
}

// TestWindowReallocated: an allocation freed and made again at the same
// address (CUDA's allocator does this; PyTorch's after empty_cache) is a
// new allocation to both sides: the peer reads the new bytes, and the old
// export and mapping are dropped, not kept beside the new ones.
func TestWindowReallocated(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{Devices: 2, ReuseFreed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	d0, _ := drv.Device(0)
	d1, err := drv.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	host := func(int) string { return "fakehost" }
	w0, w1 := NewWindow(d0, 2, host), NewWindow(d1, 2, host)
	defer w0.Close()
	defer w1.Close()
	s0, err := d0.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()
	s1, err := d1.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	const n = 1 << 14
	var addr uintptr
	for round := range 4 {
		buf, err := d0.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			addr = buf.Ptr()
		} else if buf.Ptr() != addr {
			t.Fatalf("round %d: the fake placed the allocation at %#x, not at the freed %#x", round, buf.Ptr(), addr)
		}
		want := bytes.Repeat([]byte{byte(round + 1)}, n)
		if err := s0.CopyHtoD(buf, want); err != nil {
			t.Fatal(err)
		}
		if err := s0.Synchronize(); err != nil {
			t.Fatal(err)
		}
		desc := wired(t, w0, buf.Sub(0, n))
		m, err := w1.Open(0, desc)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := s1.CopyDtoH(got, m); err != nil {
			t.Fatal(err)
		}
		if err := s1.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: the peer read %d..., want %d...", round, got[0], want[0])
		}
		if len(w1.opened[0]) != 1 {
			t.Errorf("round %d: the peer holds %d mappings of rank 0's memory, want 1 (the freed ones dropped)", round, len(w1.opened[0]))
		}
		if k := len(w0.exports[addr]); k != 1 {
			t.Errorf("round %d: the owner keeps %d exports at %#x, want 1", round, k, addr)
		}
		if err := buf.Free(); err != nil {
			t.Fatal(err)
		}
	}
}

// wired describes b in w and returns the description as the peer gets it
// (Put, then GetDesc).
func wired(t *testing.T, w *Window, b *gpu.Buffer) Desc {
	t.Helper()
	d, err := w.Describe(b)
	if err != nil {
		t.Fatal(err)
	}
	wire := make([]byte, DescBytes)
	d.Put(wire)
	return GetDesc(wire)
}
