package capi

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// oneRankFixture is a one-rank communicator on a fake GPU whose driver
// counts its calls, with an idMem (an Identifier, as cmd/libnccl's
// cudaMemory) as the library's Memory.
type oneRankFixture struct {
	t     *testing.T
	l     *Library
	h     uintptr
	mem   *idMem
	dv    *gpu.Device
	s     *gpu.Stream
	calls *gpufake.Calls
}

func newOneRankFixture(t *testing.T) *oneRankFixture {
	t.Helper()
	mem := &idMem{fakeMem: &fakeMem{alloc: map[uintptr]Region{}}}
	drv, calls, err := gpufake.OpenCounted(gpufake.Config{Devices: 1, IPCRefused: func(p uintptr) bool {
		mem.mu.Lock() // as the driver refuses VMM memory
		defer mem.mu.Unlock()
		return mem.alloc[p].NoIPC
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, h, dv := oneDeviceRankOn(t, drv, mem)
	s := newStream(t, dv)
	t.Cleanup(func() { s.Close() })
	return &oneRankFixture{t: t, l: l, h: h, mem: mem, dv: dv, s: s, calls: calls}
}

// alloc is a foreign allocation of n bytes (VMM memory when noIPC).
func (f *oneRankFixture) alloc(n int, noIPC bool) *gpu.Buffer {
	f.t.Helper()
	b, err := f.dv.Alloc(n)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mem.addAs(b, 0, noIPC)
	f.t.Cleanup(func() { _ = f.mem.free(b) })
	return b
}

func (f *oneRankFixture) put(b *gpu.Buffer, v []float32) {
	f.t.Helper()
	if err := f.s.CopyHtoD(b.Sub(0, 4*len(v)), float32s(v)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *oneRankFixture) get(b *gpu.Buffer, n int) []float32 {
	f.t.Helper()
	host := make([]byte, 4*n)
	if err := f.s.CopyDtoH(host, b.Sub(0, 4*n)); err != nil {
		f.t.Fatal(err)
	}
	return fromFloat32s(host)
}

// preMulSum is a PreMulSum by v on float32, its scalar host-immediate or
// in a device allocation of its own.
func (f *oneRankFixture) preMulSum(v float32, device bool) int32 {
	f.t.Helper()
	b := float32s([]float32{v})
	var ptr uintptr
	residence := ScalarHostImmediate
	if device {
		sb := f.alloc(4, false)
		f.put(sb, []float32{v})
		ptr, b, residence = sb.Ptr(), nil, ScalarDevice
	}
	op, err := f.l.CreatePreMulSum(f.h, b, ptr, residence, ncclFloat32)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = f.l.DestroyRedOp(f.h, op) })
	return op
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// driverCalls is what one call made: the fake driver's calls by entry
// point and, as "Identify" and "Locate", the Memory's queries (each one
// cuPointerGetAttributes in cmd/libnccl).
type driverCalls map[string]int

func (d driverCalls) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, d[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// measure runs call k times after a first (warm) run and returns the
// driver calls of one run: every count must be a multiple of k.
func (f *oneRankFixture) measure(k int, run func() error) driverCalls {
	f.t.Helper()
	// On one OS thread, as a C program's calls are (cgo runs a call on its
	// caller's thread): the CUDA context is current per thread, and a
	// goroutine moved to another thread between two calls makes its
	// context current there, a cuCtxSetCurrent no C caller's calls make
	// (seen in CI, one in five calls).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := run(); err != nil {
		f.t.Fatal(err)
	}
	before := f.calls.Counts()
	ids, locs := f.mem.identifies.Load(), f.mem.locates.Load()
	for range k {
		if err := run(); err != nil {
			f.t.Fatal(err)
		}
	}
	d := f.calls.Since(before)
	if n := f.mem.identifies.Load() - ids; n > 0 {
		d["Identify"] = int(n)
	}
	if n := f.mem.locates.Load() - locs; n > 0 {
		d["Locate"] = int(n)
	}
	per := driverCalls{}
	for name, n := range d {
		if n%k != 0 {
			f.t.Fatalf("%d calls made %d %s: not the same number each", k, n, name)
		}
		per[name] = n / k
	}
	return per
}

// TestOneRankDriverCalls pins the driver calls of a warm call on a
// one-rank communicator (issue 29, "1 rank ≤ 1.0× NCCL"). NCCL 2.28 makes
// there, per call (ncclLaunchOneRank): out of place one cudaMemcpyAsync
// on the caller's stream, in place nothing, and for a PreMulSum (which
// its avg of floats is) one kernel launch, in place too; it asks nothing
// about the pointers or the capture. flexlink makes, out of place, the
// copy (cuMemcpyAsync) and cuCtxGetCurrent (a read of the thread's
// binding: the context is made current only when another is); and it
// asks the driver about each distinct allocation once (Identify,
// cuPointerGetAttributes: memory type and buffer id), which is how it
// tells device from host memory and keeps its cache of allocations right
// when memory is freed and allocated again (mem.go). In place: the
// Identify only. Avg of one rank is its input: a copy. A PreMulSum is one
// kernel, its host-immediate scalar copied into the scratch first. A call
// on a capturing stream makes the same calls: the copy or kernel becomes
// a node of the graph, and a replay works on the new input. The results
// are checked against a float64 reference.
func TestOneRankDriverCalls(t *testing.T) {
	const count = 1000
	outOfPlace := driverCalls{"CtxGetCurrent": 1, "MemcpyAsync": 1, "Identify": 2}
	inPlace := driverCalls{"Identify": 1}
	type row struct {
		kind    Kind
		op      int32  // ncclSum 0, ncclAvg 4
		premul  string // "host" or "device": a PreMulSum by 0.5 whose scalar is host-immediate or in device memory
		inPlace bool
		noIPC   bool // VMM memory, which cannot be IPC-exported
		oneBuf  bool // send and recv are two ranges of one allocation
		capture bool // the call is captured and the graph replayed
		group   bool // ncclSend and ncclRecv to itself in a group
		want    driverCalls
	}
	var rows []row
	for _, kind := range []Kind{AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll} {
		for _, ip := range []bool{false, true} {
			want := outOfPlace
			if ip {
				want = inPlace
			}
			rows = append(rows, row{kind: kind, inPlace: ip, want: want})
			switch kind {
			case AllReduce, ReduceScatter, Reduce:
				rows = append(rows, row{kind: kind, op: 4, inPlace: ip, want: want})
			}
		}
	}
	// A PreMulSum is one kernel (NCCL's too); a host-immediate scalar is
	// first copied into the communicator's scratch, whose reuse is
	// ordered by an event, and under capture into the graph's own: so the
	// capture is asked. A device scalar is asked about as a buffer.
	hostScalar := driverCalls{"CtxGetCurrent": 5, "StreamCaptureInfo": 1, "StreamWaitEvent": 1, "MemcpyHtoDAsync": 1, "LaunchKernel": 1, "EventRecord": 1, "Identify": 2}
	hostScalarInPlace := maps.Clone(hostScalar)
	hostScalarInPlace["Identify"] = 1
	for _, kind := range []Kind{AllReduce, ReduceScatter, Reduce} {
		rows = append(rows,
			row{kind: kind, premul: "host", want: hostScalar},
			row{kind: kind, premul: "host", inPlace: true, want: hostScalarInPlace},
			row{kind: kind, premul: "device", want: driverCalls{"CtxGetCurrent": 1, "LaunchKernel": 1, "Identify": 3}},
			row{kind: kind, premul: "device", inPlace: true, want: driverCalls{"CtxGetCurrent": 1, "LaunchKernel": 1, "Identify": 2}},
		)
	}
	rows = append(rows,
		row{kind: AllReduce, premul: "device", capture: true, want: driverCalls{"CtxGetCurrent": 1, "LaunchKernel": 1, "Identify": 3}},
		row{kind: AllReduce, noIPC: true, want: outOfPlace},
		row{kind: AllReduce, oneBuf: true, want: driverCalls{"CtxGetCurrent": 1, "MemcpyAsync": 1, "Identify": 1}},
		row{kind: AllReduce, capture: true, want: outOfPlace},
		row{kind: AllReduce, op: 4, capture: true, want: outOfPlace},
		row{kind: AllReduce, inPlace: true, capture: true, want: inPlace},
		row{kind: AllToAll, group: true, want: driverCalls{"CtxGetCurrent": 1, "MemcpyAsync": 1, "Identify": 2}},
	)
	f := newOneRankFixture(t)
	for _, r := range rows {
		name := r.kind.String()
		if r.group {
			name = "ncclSend+ncclRecv"
		}
		name += map[int32]string{0: "-sum", 4: "-avg"}[r.op]
		if r.premul != "" {
			name = r.kind.String() + "-premulsum-" + r.premul
		}
		for _, s := range []struct {
			on   bool
			text string
		}{{r.inPlace, "-inplace"}, {r.noIPC, "-vmm"}, {r.oneBuf, "-onealloc"}, {r.capture, "-captured"}} {
			if s.on {
				name += s.text
			}
		}
		t.Run(name, func(t *testing.T) {
			f.t = t
			send := f.alloc(4*count, r.noIPC)
			recv := send
			switch {
			case r.oneBuf:
				both := f.alloc(8*count, r.noIPC)
				send, recv = both.Sub(0, 4*count), both.Sub(4*count, 4*count)
			case !r.inPlace:
				recv = f.alloc(4*count, r.noIPC)
			}
			stream := f.s
			call := Call{Kind: r.kind, Send: devPtr(send), Recv: devPtr(recv), Count: count, Type: ncclFloat32, Op: r.op, Stream: stream.Handle()}
			const scalar = 0.5
			if r.premul != "" {
				call.Op = f.preMulSum(scalar, r.premul == "device")
			}
			runs := 0 // an in-place PreMulSum scales the buffer again at each
			run := func() error { runs++; return f.l.Coll(1, f.h, call) }
			if r.group {
				run = func() error {
					f.l.GroupStart(1)
					err := f.l.Coll(1, f.h, Call{Kind: Send, Send: devPtr(send), Count: count, Type: ncclFloat32, Stream: stream.Handle()})
					if err == nil {
						err = f.l.Coll(1, f.h, Call{Kind: Recv, Recv: devPtr(recv), Count: count, Type: ncclFloat32, Stream: stream.Handle()})
					}
					if gerr := f.l.GroupEnd(1); err == nil {
						err = gerr
					}
					return err
				}
			}
			in := func(k, i int) float64 { return float64((i*7+k*3)%23) - 11 }
			input := func(k int) []float32 {
				v := make([]float32, count)
				for i := range v {
					v[i] = float32(in(k, i))
				}
				return v
			}
			// ref is the reference: every rank's input summed (averaged
			// for avg) in float64; one rank here.
			const nranks = 1
			ref := func(k, i int) float64 {
				x := in(k, i)
				if r.premul != "" {
					for range max(1, runs*b2i(r.inPlace)) {
						x *= scalar
					}
				}
				sum := 0.0
				for range nranks {
					sum += x
				}
				if r.op == 4 {
					sum /= nranks
				}
				return sum
			}
			check := func(k int, what string) {
				t.Helper()
				if err := f.s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				got := f.get(recv, count)
				for i, g := range got {
					if want := ref(k, i); float64(g) != want {
						t.Fatalf("%s %d: element %d = %v, want %v", what, k, i, g, want)
					}
				}
			}
			f.put(send, input(0))
			var x *gpu.GraphExec
			if r.capture {
				cs := newCapture(t, f.dv)
				defer cs.Close()
				call.Stream = cs.Handle()
				got := f.measure(3, run)
				g, err := cs.EndCapture()
				if err != nil {
					t.Fatal(err)
				}
				x, err = g.Instantiate()
				g.Close()
				if err != nil {
					t.Fatal(err)
				}
				defer x.Close()
				if !maps.Equal(got, r.want) {
					t.Errorf("driver calls per captured call: %v; want %v", got, r.want)
				}
			} else {
				got := f.measure(5, run)
				if !maps.Equal(got, r.want) {
					t.Errorf("driver calls per call: %v; want %v", got, r.want)
				}
				check(0, "eager")
			}
			for k := 1; k <= 2 && x != nil; k++ {
				f.put(send, input(k))
				if !r.inPlace {
					f.put(recv, make([]float32, count))
				}
				if err := x.Launch(f.s); err != nil {
					t.Fatal(err)
				}
				check(k, "replay")
			}
		})
	}
}

// TestOneRankCaptureInvalidated: a one-rank call on a stream whose capture
// was invalidated before it (the plane's query no longer says so: the
// copy's own error does) is refused with ncclInvalidUsage, and the
// communicator stays usable: an eager call after it copies right.
func TestOneRankCaptureInvalidated(t *testing.T) {
	const count = 64
	f := newOneRankFixture(t)
	send, recv := f.alloc(4*count, false), f.alloc(4*count, false)
	cs := newCapture(t, f.dv)
	defer cs.Close()
	if err := cs.Synchronize(); err == nil { // synchronising a capturing stream invalidates its capture
		t.Fatal("synchronising a capturing stream succeeded")
	}
	call := Call{Kind: AllReduce, Send: devPtr(send), Recv: devPtr(recv), Count: count, Type: ncclFloat32, Stream: cs.Handle()}
	err := f.l.Coll(1, f.h, call)
	if ResultOf(err) != InvalidUsage {
		t.Fatalf("call on an invalidated capture: %v (result %d), want ncclInvalidUsage", err, ResultOf(err))
	}
	if _, err := cs.EndCapture(); err == nil {
		t.Error("the invalidated capture ended without an error")
	}
	v := make([]float32, count)
	for i := range v {
		v[i] = float32(i%9) - 4.5
	}
	f.put(send, v)
	call.Stream = f.s.Handle()
	if err := f.l.Coll(1, f.h, call); err != nil {
		t.Fatalf("eager call after the refused one: %v", err)
	}
	for i, g := range f.get(recv, count) {
		if want := float64(v[i]); float64(g) != want {
			t.Fatalf("element %d = %v, want %v", i, g, want)
		}
	}
}

// TestOneRankArgumentsChecked: the one-rank path checks a call's buffers
// as every call's are checked: each refusal is ncclInvalidArgument,
// enqueues nothing, and leaves the communicator usable.
func TestOneRankArgumentsChecked(t *testing.T) {
	const count = 64
	f := newOneRankFixture(t)
	send := f.alloc(4*count, false)
	short := f.alloc(4*count-4, false)
	host := make([]float32, count)
	for _, c := range []struct {
		name string
		recv unsafe.Pointer
	}{
		{"recv in the send buffer's allocation, running past it", unsafe.Add(devPtr(send), 4)},
		{"recv an allocation one element short", devPtr(short)},
		{"recv host memory, send device memory", unsafe.Pointer(&host[0])},
		{"recv NULL", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.t = t
			before := f.calls.Counts()
			err := f.l.Coll(1, f.h, Call{Kind: AllReduce, Send: devPtr(send), Recv: c.recv, Count: count, Type: ncclFloat32, Stream: f.s.Handle()})
			if ResultOf(err) != InvalidArgument {
				t.Fatalf("got %v (result %d), want ncclInvalidArgument", err, ResultOf(err))
			}
			if d := f.calls.Since(before); d["MemcpyAsync"] != 0 || d["LaunchKernel"] != 0 {
				t.Errorf("the refused call enqueued: %v", driverCalls(d))
			}
		})
	}
	f.t = t
	recv := f.alloc(4*count, false)
	if err := f.l.Coll(1, f.h, Call{Kind: AllReduce, Send: devPtr(send), Recv: devPtr(recv), Count: count, Type: ncclFloat32, Stream: f.s.Handle()}); err != nil {
		t.Fatalf("a good call after the refused ones: %v", err)
	}
}

// TestCountZeroNoDriverCall: a call of count 0 succeeds at once, as NCCL's,
// whatever its buffers (NULL too), and asks the driver nothing.
func TestCountZeroNoDriverCall(t *testing.T) {
	f := newOneRankFixture(t)
	buf := f.alloc(64, false)
	for _, kind := range []Kind{AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter, Send, Recv} {
		for _, p := range []unsafe.Pointer{devPtr(buf), nil} {
			before := f.calls.Counts()
			err := f.l.Coll(1, f.h, Call{Kind: kind, Send: p, Recv: p, Count: 0, Type: ncclFloat32, Stream: f.s.Handle()})
			if err != nil {
				t.Errorf("%s of count 0 (buffer %p): %v", kind, p, err)
			}
			if d := f.calls.Since(before); len(d) != 0 {
				t.Errorf("%s of count 0 (buffer %p) made driver calls %v", kind, p, driverCalls(d))
			}
		}
	}
}
