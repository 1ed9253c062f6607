package capi

import (
	"encoding/binary"
	"math"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/settings"
)

// devFixture is n ranks of one Library on the fake driver's GPUs (rank r
// on GPU r), each with a stream, as nccl-tests -g n runs them: one thread
// makes every rank's calls inside one group.
type devFixture struct {
	t   testing.TB
	l   *Library
	drv *gpu.Driver
	mem *fakeMem
	hs  []uintptr
	dvs []*gpu.Device
	ss  []*gpu.Stream
}

const fixtureTid = 7

func newDevFixture(t testing.TB, n int, cfg gpufake.Config, env ...string) *devFixture {
	t.Helper()
	mem := &fakeMem{alloc: map[uintptr]Region{}}
	cfg.IPCRefused = func(p uintptr) bool { // as the driver refuses VMM memory
		mem.mu.Lock()
		defer mem.mu.Unlock()
		return mem.alloc[p].NoIPC
	}
	return newDevFixtureOn(t, n, cfg, mem, mem, env...)
}

// newDevFixtureOn is newDevFixture keeping its allocations in mem, with
// lib as the library's Memory.
func newDevFixtureOn(t testing.TB, n int, cfg gpufake.Config, mem *fakeMem, lib Memory, env ...string) *devFixture {
	t.Helper()
	cfg.Devices = n
	drv, err := gpufake.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &devFixture{t: t, drv: drv, mem: mem}
	vars := map[string]string{
		"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_CACHE_DIR": t.TempDir(), "FLEXLINK_GPU_KERNEL_TIMEOUT": "60s",
	}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	f.l = New(Options{
		Env:    settings.Map(vars),
		Memory: lib,
		Driver: func() (*gpu.Driver, error) { return drv, nil },
	})
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	if f.hs, err = f.l.InitAll(n, devs); err != nil {
		t.Fatal(err)
	}
	for r := range n {
		dv, err := drv.Device(r)
		if err != nil {
			t.Fatal(err)
		}
		f.dvs, f.ss = append(f.dvs, dv), append(f.ss, newStream(t, dv))
	}
	t.Cleanup(f.close)
	return f
}

func (f *devFixture) close() {
	var wg sync.WaitGroup
	for _, h := range f.hs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = f.l.Destroy(h) }()
	}
	wg.Wait()
	f.drv.Close()
}

// alloc is a foreign allocation of rank r (cudaMalloc's, or VMM memory
// when noIPC).
func (f *devFixture) alloc(r, n int, noIPC bool) *gpu.Buffer {
	f.t.Helper()
	b, err := f.dvs[r].Alloc(n)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mem.addAs(b, r, noIPC)
	return b
}

// reallocAt frees rank r's allocation b and allocates as much again,
// which the fake (Config.ReuseFreed) must place at b's address.
func (f *devFixture) reallocAt(t *testing.T, r int, b *gpu.Buffer) *gpu.Buffer {
	t.Helper()
	if err := f.mem.free(b); err != nil {
		t.Fatal(err)
	}
	nb := f.alloc(r, b.Len(), false)
	if nb.Ptr() != b.Ptr() {
		t.Fatalf("rank %d: the fake placed the new allocation at %#x, not at the freed %#x", r, nb.Ptr(), b.Ptr())
	}
	return nb
}

func (f *devFixture) upload(r int, b *gpu.Buffer, host []byte) {
	f.t.Helper()
	if err := f.ss[r].CopyHtoD(b.Sub(0, len(host)), host); err != nil {
		f.t.Fatal(err)
	}
}

func (f *devFixture) download(r int, b *gpu.Buffer, n int) []byte {
	f.t.Helper()
	host := make([]byte, n)
	if err := f.ss[r].CopyDtoH(host, b.Sub(0, n)); err != nil {
		f.t.Fatal(err)
	}
	if err := f.ss[r].Synchronize(); err != nil {
		f.t.Fatal(err)
	}
	return host
}

// group makes call(r) for every rank inside one group and returns the
// first error (a call's, or the group end's).
func (f *devFixture) group(call func(r int) Call) error {
	f.l.GroupStart(fixtureTid)
	var first error
	for r := range f.hs {
		if err := f.l.Coll(fixtureTid, f.hs[r], call(r)); err != nil && first == nil {
			first = err
		}
	}
	if err := f.l.GroupEnd(fixtureTid); err != nil && first == nil {
		first = err
	}
	return first
}

func float32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func fromFloat32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
