package capi

import (
	"encoding/binary"
	"math"
	"sync"
	"testing"
	"unsafe"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// fakeMem is the Memory of a process whose device pointers are the fake
// driver's allocations the test registered.
// Each added allocation gets a new buffer id, as the driver gives one
// (CU_POINTER_ATTRIBUTE_BUFFER_ID); noIPC marks it as memory that cannot be
// IPC-exported (VMM, as PyTorch's expandable_segments).
type fakeMem struct {
	mu     sync.Mutex
	alloc  map[uintptr]Region
	nextID uint64
}

func (m *fakeMem) add(b *gpu.Buffer, dev int) { m.addAs(b, dev, false) }

func (m *fakeMem) addAs(b *gpu.Buffer, dev int, noIPC bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	m.alloc[b.Ptr()] = Region{Device: dev, Base: b.Ptr(), Size: b.Len(), BufferID: m.nextID, NoIPC: noIPC}
}

// free forgets b's allocation and frees it.
func (m *fakeMem) free(b *gpu.Buffer) error {
	m.mu.Lock()
	delete(m.alloc, b.Ptr())
	m.mu.Unlock()
	return b.Free()
}

func (m *fakeMem) Locate(p uintptr) (Region, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for base, r := range m.alloc {
		if p >= base && p < base+uintptr(r.Size) {
			return r, true
		}
	}
	return Region{}, false
}
func (m *fakeMem) CurrentDevice() int               { return 0 }
func (m *fakeMem) Capturing(uintptr) bool           { return false }
func (m *fakeMem) Synchronize(stream uintptr) error { return nil }

// devPtr is a device address as the C caller passes it (not a Go pointer).
func devPtr(b *gpu.Buffer) unsafe.Pointer {
	p := b.Ptr()
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

// TestDeviceBuffers runs the C library's device path on the fake driver:
// ncclCommInitAll over two fake GPUs, then allreduce, allgather and a
// broadcast whose non-root passes the same pointer as send and recv (as
// PyTorch does), each on the ranks' own streams inside one group from one
// thread (nccl-tests -g 2), and a PreMulSum allreduce, checked against
// float64 references.
func TestDeviceBuffers(t *testing.T) {
	f := newDevFixture(t, 2, gpufake.Config{})
	l, hs := f.l, f.hs
	const count = 1000
	type rankBufs struct {
		s          *gpu.Stream
		send, recv *gpu.Buffer
	}
	var rs [2]rankBufs
	for r := range rs {
		rs[r] = rankBufs{f.ss[r], f.alloc(r, count*4, false), f.alloc(r, 2*count*4, false)}
	}
	value := func(r, i int) float32 { return float32((r+1)*i%97) / 4 }
	upload := func(r int, b *gpu.Buffer, fn func(i int) float32, n int) {
		v := make([]float32, n)
		for i := range v {
			v[i] = fn(i)
		}
		f.upload(r, b, float32s(v))
	}
	download := func(r int, b *gpu.Buffer, n int) []float32 { return fromFloat32s(f.download(r, b, 4*n)) }
	group := func(call func(r int) Call) {
		t.Helper()
		if err := f.group(call); err != nil {
			t.Fatal(err)
		}
	}
	var err error

	for r := range rs {
		upload(r, rs[r].send, func(i int) float32 { return value(r, i) }, count)
	}
	group(func(r int) Call {
		return Call{Kind: AllReduce, Send: devPtr(rs[r].send), Recv: devPtr(rs[r].recv), Count: count, Type: ncclFloat32, Op: 0, Stream: rs[r].s.Handle()}
	})
	for r := range rs {
		got := download(r, rs[r].recv, count)
		for i, v := range got {
			if want := float64(value(0, i)) + float64(value(1, i)); math.Abs(float64(v)-want) > 1e-3 {
				t.Fatalf("allreduce rank %d element %d = %v, want %v", r, i, v, want)
			}
		}
	}

	group(func(r int) Call {
		return Call{Kind: AllGather, Send: devPtr(rs[r].send), Recv: devPtr(rs[r].recv), Count: count, Type: ncclFloat32, Stream: rs[r].s.Handle()}
	})
	for r := range rs {
		got := download(r, rs[r].recv, 2*count)
		for i, v := range got {
			if want := value(i/count, i%count); v != want {
				t.Fatalf("allgather rank %d element %d = %v, want %v", r, i, v, want)
			}
		}
	}

	// Broadcast from rank 1; rank 0 passes its recv buffer as send too.
	upload(1, rs[1].send, func(i int) float32 { return float32(i) * 3 }, count)
	group(func(r int) Call {
		send := devPtr(rs[r].send)
		if r == 0 {
			send = devPtr(rs[r].recv)
		}
		return Call{Kind: Broadcast, Send: send, Recv: devPtr(rs[r].recv), Count: count, Type: ncclFloat32, Root: 1, Stream: rs[r].s.Handle()}
	})
	for r := range rs {
		got := download(r, rs[r].recv, count)
		for i, v := range got {
			if want := float32(i) * 3; v != want {
				t.Fatalf("broadcast rank %d element %d = %v, want %v", r, i, v, want)
			}
		}
	}

	// PreMulSum on device buffers: each rank's send times its scalar, summed.
	scalars := [2]float64{0.5, 3}
	var pre [2]int32
	for r := range rs {
		sc := make([]byte, 4)
		binary.LittleEndian.PutUint32(sc, math.Float32bits(float32(scalars[r])))
		if pre[r], err = l.CreatePreMulSum(hs[r], sc, 0, ScalarHostImmediate, ncclFloat32); err != nil {
			t.Fatal(err)
		}
		upload(r, rs[r].send, func(i int) float32 { return value(r, i) }, count)
	}
	group(func(r int) Call {
		return Call{Kind: AllReduce, Send: devPtr(rs[r].send), Recv: devPtr(rs[r].recv), Count: count, Type: ncclFloat32, Op: pre[r], Stream: rs[r].s.Handle()}
	})
	for r := range rs {
		got := download(r, rs[r].recv, count)
		for i, v := range got {
			want := scalars[0]*float64(value(0, i)) + scalars[1]*float64(value(1, i))
			if math.Abs(float64(v)-want) > 1e-3 {
				t.Fatalf("premulsum rank %d element %d = %v, want %v", r, i, v, want)
			}
		}
	}

}
