package capi

import (
	"testing"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/settings"
)

// The per-call cost of the C library's entry path (issue 29, the small
// message fast path), on one rank so that only the library's own work is
// measured: go test ./capi -run '^$' -bench AllReduce1 -benchmem.

// BenchmarkAllReduce1Host is ncclAllReduce of 8 floats on host buffers,
// one rank, no CUDA in the process.
func BenchmarkAllReduce1Host(b *testing.B) {
	l, h := oneHostRank(b)
	buf := make([]float32, 8)
	p := unsafe.Pointer(&buf[0])
	call := Call{Kind: AllReduce, Send: p, Recv: p, Count: 8, Type: ncclFloat32}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Coll(1, h, call); err != nil {
			b.Fatal(err)
		}
	}
}

// callDeadlines are the allocation tests' settings: no default call
// deadline, and FLEXLINK_TIMEOUT (env: name, value).
var callDeadlines = []struct {
	name string
	env  []string
}{
	{"no deadline", nil},
	{"FLEXLINK_TIMEOUT", []string{"FLEXLINK_TIMEOUT", "5m"}},
}

// oneHostRank is a Library with one rank and no CUDA, with the default
// call deadline (none) unless env sets FLEXLINK_TIMEOUT (env: name, value,
// ...); it is destroyed when tb ends.
func oneHostRank(tb testing.TB, env ...string) (*Library, uintptr) {
	tb.Helper()
	vars := map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s"}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	l := New(Options{Env: settings.Map(vars)})
	hs, err := l.InitAll(1, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Destroy(hs[0]) })
	return l, hs[0]
}

// BenchmarkAllReduce1Device is ncclAllReduce of 8 floats on device buffers
// of the fake driver, one rank: the buffer's location (Memory.Locate), its
// Buffer, the stream, and the device collective's enqueue.
func BenchmarkAllReduce1Device(b *testing.B) {
	l, h, mem, dv := oneDeviceRank(b, &fakeMem{alloc: map[uintptr]Region{}})
	buf, s := memAlloc(b, dv, mem, 4*8, 0), newStream(b, dv)
	call := Call{Kind: AllReduce, Send: devPtr(buf), Recv: devPtr(buf), Count: 8, Type: ncclFloat32, Stream: s.Handle()}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Coll(1, h, call); err != nil {
			b.Fatal(err)
		}
	}
}

// oneDeviceRank is a Library over mem on the fake driver with one rank on
// its GPU 0; it is destroyed when tb ends.
func oneDeviceRank[M Memory](tb testing.TB, mem M) (*Library, uintptr, M, *gpu.Device) {
	tb.Helper()
	drv, err := gpufake.Open(gpufake.Config{Devices: 1})
	if err != nil {
		tb.Fatal(err)
	}
	l, h, dv := oneDeviceRankOn(tb, drv, mem)
	return l, h, mem, dv
}

// oneDeviceRankOn is oneDeviceRank on drv, which it closes when tb ends.
func oneDeviceRankOn(tb testing.TB, drv *gpu.Driver, mem Memory) (*Library, uintptr, *gpu.Device) {
	tb.Helper()
	l := New(Options{
		Env:    settings.Map(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_CACHE_DIR": tb.TempDir()}),
		Memory: mem,
		Driver: func() (*gpu.Driver, error) { return drv, nil },
	})
	hs, err := l.InitAll(1, []int{0})
	if err != nil {
		tb.Fatal(err)
	}
	dv, err := drv.Device(0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Destroy(hs[0]); drv.Close() })
	return l, hs[0], dv
}

// memAlloc is a foreign allocation of n bytes on dv, known to mem as
// memory of GPU dev.
func memAlloc(tb testing.TB, dv *gpu.Device, mem interface{ add(*gpu.Buffer, int) }, n, dev int) *gpu.Buffer {
	tb.Helper()
	buf, err := dv.Alloc(n)
	if err != nil {
		tb.Fatal(err)
	}
	mem.add(buf, dev)
	return buf
}

// newStream is a new stream of dv.
func newStream(tb testing.TB, dv *gpu.Device) *gpu.Stream {
	tb.Helper()
	s, err := dv.NewStream()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// newCapture is a new stream of dv with a global capture begun on it.
func newCapture(tb testing.TB, dv *gpu.Device) *gpu.Stream {
	tb.Helper()
	cs := newStream(tb, dv)
	if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
		cs.Close()
		tb.Fatal(err)
	}
	return cs
}

// TestFastPathNoAllocs: the library's own steps of a call on buffers it
// has seen make no heap allocation: finding the communicator and that it
// is healthy, locating a buffer by its allocation's id, its Buffer, the
// caller's stream, a host buffer's view, and the checked call itself.
func TestFastPathNoAllocs(t *testing.T) {
	mem := &idMem{fakeMem: &fakeMem{alloc: map[uintptr]Region{}}}
	l, h, _, dv := oneDeviceRank(t, mem)
	buf, s := memAlloc(t, dv, mem, 4*64, 0), newStream(t, dv)
	c := l.handles.get(h)
	host := make([]float32, 8)
	hp := unsafe.Pointer(&host[0])
	p := devPtr(buf)
	steps := []struct {
		name string
		f    func()
	}{
		{"the communicator", func() { _, _ = l.handles.comm(h, "ncclAllReduce") }},
		{"healthy", func() { _ = c.usable("ncclAllReduce") }},
		{"locate", func() { _, _ = l.opt.Memory.Locate(buf.Ptr() + 16) }},
		{"buffer", func() {
			r, _ := l.opt.Memory.Locate(buf.Ptr())
			_, _ = l.mem.buffer(dv, r, p, 32)
		}},
		{"stream", func() { _ = c.wrapStream(s.Handle()) }},
		{"host view", func() { _ = c.views.data(hp, 32, dtype.Float32) }},
		{"work", func() { l.freeWork(l.newWork(c, Call{Kind: AllReduce})) }},
	}
	for _, st := range steps {
		st.f() // the first time may allocate (a new allocation, stream, view)
		if n := testing.AllocsPerRun(200, st.f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", st.name, n)
		}
	}
	if got := mem.locates.Load(); got != 1 {
		t.Errorf("Locate asked %d times for one allocation, want 1", got)
	}
}

// TestHostCallAllocs: a warm ncclAllReduce on host buffers of exactly the
// call's bytes, one rank, makes at most the collective observer's three
// allocations (the record of the call in flight and its start and end
// notes): the engine takes such buffers as they are, without a new
// interface value per slice (it made 7 when it re-sliced them). The same
// with a default call deadline (FLEXLINK_TIMEOUT): a call that does not
// wait makes no timer (it made 4 more allocations with one).
func TestHostCallAllocs(t *testing.T) {
	for _, c := range callDeadlines {
		t.Run(c.name, func(t *testing.T) {
			l, h := oneHostRank(t, c.env...)
			send, recv := make([]float32, 8), make([]float32, 8)
			for i := range send {
				send[i] = float32(i) + 0.5
			}
			call := Call{Kind: AllReduce, Send: unsafe.Pointer(&send[0]), Recv: unsafe.Pointer(&recv[0]), Count: 8, Type: ncclFloat32}
			run := func() {
				if err := l.Coll(1, h, call); err != nil {
					t.Fatal(err)
				}
			}
			run()
			if n := testing.AllocsPerRun(200, run); n > 3 {
				t.Errorf("a one-rank host allreduce: %v allocations per call, want at most 3", n)
			}
			for i, v := range recv {
				if v != send[i] {
					t.Fatalf("recv[%d] = %v, want %v (one rank's sum is its input)", i, v, send[i])
				}
			}
		})
	}
}
