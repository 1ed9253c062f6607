package gpu_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestLaunchNoAllocs: a kernel launch on a warm stream makes no heap
// allocation (the stream's spare parameter block; issue 29), and launches
// from several threads on one stream each pass their own parameters: every
// copy lands where its own arguments say, though each launch dwells in the
// driver (a block shared between two launches would be overwritten there).
func TestLaunchNoAllocs(t *testing.T) {
	var dwell atomic.Bool
	dv, _ := fakeDevice(t, gpufake.Config{Devices: 1, LaunchFault: func(int, string) error {
		if dwell.Load() {
			time.Sleep(20 * time.Microsecond)
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
	dwell.Store(true)
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
