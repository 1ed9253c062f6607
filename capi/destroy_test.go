package capi

import (
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestDestroyAnyOrder: two ranks destroy two communicators in opposite
// orders (PyTorch's shutdown walks a map). Each ncclCommDestroy returns
// within destroyWait and the device planes' collective closes finish in
// the background: the GPU memory of both communicators comes back.
func TestDestroyAnyOrder(t *testing.T) {
	f := newDevFixture(t, 2, gpufake.Config{})
	before := make([]uint64, 2)
	for r := range 2 {
		free, _, err := f.dvs[r].MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		before[r] = free
	}
	second, err := f.l.InitAll(2, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	comms := [][]uintptr{{f.hs[0], second[0]}, {f.hs[1], second[1]}} // [rank][communicator]
	bufs := [2]uintptr{}
	for r := range 2 {
		bufs[r] = f.alloc(r, 4096, false).Ptr()
	}
	for c := range 2 { // a call on each, so that each holds its flag regions
		f.l.GroupStart(fixtureTid)
		for r := range 2 {
			p := cAddr(bufs[r])
			if err := f.l.Coll(fixtureTid, comms[r][c], Call{Kind: AllReduce, Send: p, Recv: p, Count: 1024, Type: ncclFloat32, Stream: f.ss[r].Handle()}); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.l.GroupEnd(fixtureTid); err != nil {
			t.Fatal(err)
		}
	}
	for r := range 2 {
		if err := f.ss[r].Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := []int{0, 1}
			if r == 1 {
				order = []int{1, 0}
			}
			for _, c := range order {
				if err := f.l.Destroy(comms[r][c]); err != nil {
					t.Errorf("rank %d: destroy communicator %d: %v", r, c, err)
				}
			}
		}()
	}
	wg.Wait()
	if took := time.Since(start); took > 3*destroyWait {
		t.Errorf("destroying in opposite orders took %v", took)
	}
	f.hs = nil // destroyed here
	// The closes go on in the background; each is bounded by the device
	// plane's own close limit (30 s). Once they are done, every byte the
	// two communicators made is back.
	f.l.closing.Wait()
	for r := range 2 {
		free, _, err := f.dvs[r].MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		if free+4096 != before[r] { // the test's own buffer stays
			t.Errorf("rank %d: %d bytes of GPU memory still held after both destroys", r, int64(before[r])-int64(free)-4096)
		}
	}
}
