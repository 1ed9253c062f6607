package gpu_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestLaunchNoAllocs: a kernel launch on a warm stream makes no heap
// allocation (the stream's spare parameter block; issue 29); while a launch
// is in the driver the block is the launch's alone (the stream holds no
// spare another launch could take and overwrite), and it is the stream's
// spare again once the launch returns. Launches from several threads on
// one stream each pass their own parameters: every copy lands where its own
// arguments say.
func TestLaunchNoAllocs(t *testing.T) {
	var (
		watched atomic.Pointer[gpu.Stream] // the stream whose launches the driver checks
		shared  atomic.Int32               // launches that found a spare block on it
	)
	dv, _ := fakeDevice(t, gpufake.Config{Devices: 1, LaunchFault: func(int, string) error {
		if s := watched.Load(); s != nil && s.HoldsSpareLaunchArgs() {
			shared.Add(1)
		}
		return nil
	}})
	s := mustStream(t, dv)
	src, dst := mustAlloc(t, dv, 64), mustAlloc(t, dv, 64)
	if err := s.CopyLocal(dst, src); err != nil { // loads the copy kernel
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() {
		if err := s.CopyLocal(dst, src); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a copy kernel's launch: %v allocations, want 0", n)
	}
	watched.Store(s)
	for range 10 {
		if err := s.CopyLocal(dst, src); err != nil {
			t.Fatal(err)
		}
		if !s.HoldsSpareLaunchArgs() {
			t.Fatal("after a launch the stream holds no spare parameter block")
		}
	}
	watched.Store(nil)
	if n := shared.Load(); n != 0 {
		t.Errorf("%d of 10 launches were in the driver while the stream offered their parameter block to another launch", n)
	}

	// Each thread copies its own 8-byte pattern into slot k of its own
	// destination, once per slot: a launch that ran another's arguments
	// leaves a slot without its bytes.
	const threads, slots, w = 4, 100, 8
	srcs, dsts := make([]*gpu.Buffer, threads), make([]*gpu.Buffer, threads)
	for i := range srcs {
		srcs[i], dsts[i] = mustAlloc(t, dv, w), mustAlloc(t, dv, slots*w)
		if err := s.CopyHtoD(srcs[i], bytes.Repeat([]byte{byte(i + 1)}, w)); err != nil {
			t.Fatal(err)
		}
		if err := s.Memset(dsts[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, threads)
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < slots && errs[i] == nil; k++ {
				errs[i] = s.CopyLocal(dsts[i].Sub(k*w, w), srcs[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("thread %d: %v", i, err)
		}
		got := make([]byte, slots*w)
		if err := s.CopyDtoH(got, dsts[i]); err != nil {
			t.Fatal(err)
		}
		if want := bytes.Repeat([]byte{byte(i + 1)}, slots*w); !bytes.Equal(got, want) {
			t.Errorf("thread %d's destination is not its own source's bytes %d in every slot: %v", i, i+1, got)
		}
	}
}
