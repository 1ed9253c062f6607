package capi

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// idMem is fakeMem as cmd/libnccl's cudaMemory is: an Identifier too, and
// it counts the driver queries each would make (Identify: one
// cuPointerGetAttributes of two attributes; Locate: one of six).
type idMem struct {
	*fakeMem
	identifies, locates atomic.Int64
}

func (m *idMem) Identify(p uintptr) (uint64, bool) {
	m.identifies.Add(1)
	r, ok := m.fakeMem.Locate(p)
	return r.BufferID, ok
}

func (m *idMem) Locate(p uintptr) (Region, bool) {
	m.locates.Add(1)
	return m.fakeMem.Locate(p)
}

// newIDFixture is newDevFixture with an idMem as the library's Memory.
func newIDFixture(t testing.TB, n int, cfg gpufake.Config, env ...string) (*devFixture, *idMem) {
	t.Helper()
	mem := &idMem{fakeMem: &fakeMem{alloc: map[uintptr]Region{}}}
	return newDevFixtureOn(t, n, cfg, mem.fakeMem, mem, env...), mem
}

// TestLocateByBufferID: with an Identifier, each buffer of each call costs
// one Identify, and Locate is asked only about an allocation not seen
// before (by buffer id). Memory freed and allocated again at the same
// address has a new id: it is located anew and the allreduce reads the new
// bytes on every rank, through each of the device paths (the flag kernels,
// and the read and push kernels that map the peers' user buffers).
func TestLocateByBufferID(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"flag", nil},
		{"read", []string{"FLEXLINK_GPU_FLAG_BYTES", "0", "FLEXLINK_GPU_ALLREDUCE", "read"}},
		{"push", []string{"FLEXLINK_GPU_FLAG_BYTES", "0", "FLEXLINK_GPU_ALLREDUCE", "push"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testLocateByID(t, tc.env) })
	}
}

func testLocateByID(t *testing.T, env []string) {
	f, mem := newIDFixture(t, 2, gpufake.Config{ReuseFreed: true}, env...)
	const count = 1024
	// Out of place: send and recv are two allocations of each rank.
	send := []*gpu.Buffer{f.alloc(0, 4*count, false), f.alloc(1, 4*count, false)}
	recv := []*gpu.Buffer{f.alloc(0, 4*count, false), f.alloc(1, 4*count, false)}
	value := func(round, r, i int) float32 { return float32((round*5+r*3+i)%241) - 100 }
	const callsPerRound = 3
	for round, realloc := range [][2]bool{{false, false}, {false, false}, {true, false}, {true, true}, {false, true}} {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			newAllocs := 0
			if round == 0 {
				newAllocs = 4 // every buffer is new to the library
			}
			for r, again := range realloc {
				if again {
					send[r] = f.reallocAt(t, r, send[r])
					newAllocs++
				}
			}
			id0, loc0 := mem.identifies.Load(), mem.locates.Load()
			for call := range callsPerRound {
				for r := range send {
					v := make([]float32, count)
					for i := range v {
						v[i] = value(round*callsPerRound+call, r, i)
					}
					f.upload(r, send[r], float32s(v))
				}
				if err := f.group(func(r int) Call {
					return Call{Kind: AllReduce, Send: devPtr(send[r]), Recv: devPtr(recv[r]), Count: count, Type: ncclFloat32, Stream: f.ss[r].Handle()}
				}); err != nil {
					t.Fatal(err)
				}
				for r := range recv {
					wrong := 0
					for i, got := range fromFloat32s(f.download(r, recv[r], 4*count)) {
						k := round*callsPerRound + call
						if want := value(k, 0, i) + value(k, 1, i); got != want {
							wrong++
						}
					}
					if wrong > 0 {
						t.Errorf("call %d: rank %d: %d of %d elements wrong", call, r, wrong, count)
					}
				}
			}
			if got, want := mem.identifies.Load()-id0, int64(callsPerRound*2*2); got != want {
				t.Errorf("Identify asked %d times for %d calls of 2 ranks with 2 buffers each, want %d", got, callsPerRound, want)
			}
			if got := mem.locates.Load() - loc0; got != int64(newAllocs) {
				t.Errorf("Locate asked %d times, want %d (once per allocation new to the library)", got, newAllocs)
			}
		})
	}
}

// TestLocateConcurrent: many threads calling on one communicator's
// buffers while others' allocations come and go find every buffer where
// it is (the table by id is read without a lock and replaced whole).
func TestLocateConcurrent(t *testing.T) {
	mem := &idMem{fakeMem: &fakeMem{alloc: map[uintptr]Region{}}}
	l, _, _, dv := oneDeviceRank(t, mem)
	lm := l.opt.Memory
	var bufs []*gpu.Buffer
	for range 8 {
		b, err := dv.Alloc(256)
		if err != nil {
			t.Fatal(err)
		}
		mem.add(b, 0)
		bufs = append(bufs, b)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				b := bufs[(g+i)%len(bufs)]
				p := b.Ptr() + uintptr(i%256)
				r, ok := lm.Locate(p)
				if !ok || r.Base != b.Ptr() || r.Size != b.Len() {
					errc <- fmt.Errorf("thread %d: Locate(%#x) = %+v, %v; want the allocation at %#x of %d bytes", g, p, r, ok, b.Ptr(), b.Len())
					return
				}
				got, err := l.mem.buffer(dv, r, devPtr(b), 64)
				if err != nil || got.Ptr() != b.Ptr() || got.Len() != 64 {
					errc <- fmt.Errorf("thread %d: buffer of %#x: %v, %v", g, b.Ptr(), got, err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // allocations that come and go: the table is replaced each time
		defer wg.Done()
		for range 200 {
			b, err := dv.Alloc(512)
			if err != nil {
				errc <- err
				return
			}
			mem.add(b, 0)
			if r, ok := lm.Locate(b.Ptr() + 8); !ok || r.Base != b.Ptr() {
				errc <- fmt.Errorf("a new allocation at %#x located at %+v, %v", b.Ptr(), r, ok)
				return
			}
			if err := mem.free(b); err != nil {
				errc <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if n := mem.locates.Load() - 200; n < int64(len(bufs)) || n > int64(4*len(bufs)) {
		t.Errorf("Locate asked %d times for %d allocations by 4 threads, want %d to %d", n, len(bufs), len(bufs), 4*len(bufs))
	}
}

// TestLocateInPlace: an in-place call (send and receive the same pointer,
// as PyTorch's all_reduce) asks the driver about its buffer once.
func TestLocateInPlace(t *testing.T) {
	mem := &idMem{fakeMem: &fakeMem{alloc: map[uintptr]Region{}}}
	l, h, _, dv := oneDeviceRank(t, mem)
	buf, s := memAlloc(t, dv, mem, 4*64, 0), newStream(t, dv)
	const calls = 10
	for range calls {
		if err := l.Coll(1, h, Call{Kind: AllReduce, Send: devPtr(buf), Recv: devPtr(buf), Count: 64, Type: ncclFloat32, Stream: s.Handle()}); err != nil {
			t.Fatal(err)
		}
	}
	if got := mem.identifies.Load(); got != calls {
		t.Errorf("Identify asked %d times for %d in-place calls, want %d", got, calls, calls)
	}
	if got := mem.locates.Load(); got != 1 {
		t.Errorf("Locate asked %d times, want 1", got)
	}
}
