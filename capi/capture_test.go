package capi

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// CUDA graph capture through the C library on the fake driver: every rank's
// calls are captured on a capture stream of its own inside one group (as
// nccl-tests -G does with -g N), the graphs replayed on the ranks' main
// streams with new inputs, between eager calls with other inputs, and every
// output is checked against a float64 reference.

// captureGroup captures call(r) for every rank, each on a new stream of
// its GPU, inside one group, and returns the instantiated graphs.
func (f *devFixture) captureGroup(mode gpu.CaptureMode, calls func(r int, s uintptr) []Call) ([]*gpu.GraphExec, error) {
	return f.captureGroupOn(f.hs, mode, calls)
}

// captureGroupOn is captureGroup on communicators hs (rank r's: hs[r]).
func (f *devFixture) captureGroupOn(hs []uintptr, mode gpu.CaptureMode, calls func(r int, s uintptr) []Call) ([]*gpu.GraphExec, error) {
	n := len(hs)
	cs := make([]*gpu.Stream, n)
	for r := range n {
		s, err := f.dvs[r].NewStream()
		if err != nil {
			return nil, err
		}
		defer s.Close()
		if err := s.BeginCapture(mode); err != nil {
			return nil, err
		}
		cs[r] = s
	}
	f.l.GroupStart(fixtureTid)
	var first error
	for r := range n {
		for _, c := range calls(r, cs[r].Handle()) {
			if err := f.l.Coll(fixtureTid, hs[r], c); err != nil && first == nil {
				first = err
			}
		}
	}
	if err := f.l.GroupEnd(fixtureTid); err != nil && first == nil {
		first = err
	}
	xs := make([]*gpu.GraphExec, n)
	for r := range n {
		g, err := cs[r].EndCapture()
		if err != nil {
			return nil, errors.Join(first, err)
		}
		if first == nil {
			xs[r], err = g.Instantiate()
		}
		g.Close() // the instantiation keeps what it needs
		if err != nil {
			return nil, err
		}
	}
	return xs, first
}

// replay launches every rank's graph on its main stream at once (a flag
// kernel waits for its peers' as on a GPU).
func (f *devFixture) replay(xs []*gpu.GraphExec) error {
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for r, x := range xs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = x.Launch(f.ss[r]) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// captureColl is one collective of the replay test: the NCCL call, its
// buffers' element counts and the expected output element of rank r from
// in(r, i), every rank's input.
type captureColl struct {
	kind       Kind
	op         int32 // ncclSum, ncclMax
	root       int
	sendN      func(n int) int
	recvN      func(n int) int
	expect     func(n, r, i, count int, in func(r, i int) float64) (float64, bool)
	skipOffOut bool // reduce: recv is written on root only
}

func captureColls() []captureColl {
	same := func(n int) int { return 1 }
	all := func(n int) int { return n }
	fold := func(n int, i int, in func(r, i int) float64, op int32) float64 {
		acc := in(0, i)
		for r := 1; r < n; r++ {
			if op == 2 {
				acc = math.Max(acc, in(r, i))
			} else {
				acc += in(r, i)
			}
		}
		return acc
	}
	return []captureColl{
		{kind: AllReduce, sendN: same, recvN: same, expect: func(n, r, i, c int, in func(r, i int) float64) (float64, bool) {
			return fold(n, i, in, 0), true
		}},
		{kind: AllReduce, op: 2, sendN: same, recvN: same, expect: func(n, r, i, c int, in func(r, i int) float64) (float64, bool) {
			return fold(n, i, in, 2), true
		}},
		{kind: ReduceScatter, sendN: all, recvN: same, expect: func(n, r, i, c int, in func(r, i int) float64) (float64, bool) {
			return fold(n, r*c+i, in, 0), true
		}},
		{kind: AllGather, sendN: same, recvN: all, expect: func(n, r, i, c int, in func(r, i int) float64) (float64, bool) {
			return in(i/c, i%c), true
		}},
		{kind: AllToAll, sendN: all, recvN: all, expect: func(n, r, i, c int, in func(r, i int) float64) (float64, bool) {
			return in(i/c, r*c+i%c), true
		}},
		{kind: Broadcast, root: -1, sendN: same, recvN: same, expect: func(n, r, i, c int, in func(r, i int) float64) (float64, bool) {
			return in(n-1, i), true
		}},
		{kind: Reduce, root: 0, sendN: same, recvN: same, skipOffOut: true, expect: func(n, r, i, c int, in func(r, i int) float64) (float64, bool) {
			return fold(n, i, in, 0), r == 0
		}},
	}
}

func TestCaptureReplay(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		for _, count := range []int{3, 5000} {
			t.Run(fmt.Sprintf("%dranks-%d", n, count), func(t *testing.T) {
				f := newDevFixture(t, n, gpufake.Config{}, "FLEXLINK_GPU_FLAG_COLL_BYTES", "4096")
				send := make([]*gpu.Buffer, n)
				recv := make([]*gpu.Buffer, n)
				for r := range n {
					send[r], recv[r] = f.alloc(r, n*count*4, false), f.alloc(r, n*count*4, false)
				}
				for _, cc := range captureColls() {
					root := cc.root
					if root < 0 {
						root = n - 1
					}
					call := func(r int, s uintptr) Call {
						return Call{Kind: cc.kind, Send: devPtr(send[r]), Recv: devPtr(recv[r]), Count: uint64(count), Type: ncclFloat32, Op: cc.op, Root: root, Stream: s}
					}
					xs, err := f.captureGroup(gpu.CaptureGlobal, func(r int, s uintptr) []Call { return []Call{call(r, s)} })
					if err != nil {
						t.Fatalf("%s: capture: %v", cc.kind, err)
					}
					for k := 1; k <= 4; k++ {
						in := func(r, i int) float64 { return float64((r*5+i+7*k)%13) - 4 }
						for r := range n {
							v := make([]float32, cc.sendN(n)*count)
							for i := range v {
								v[i] = float32(in(r, i))
							}
							f.upload(r, send[r], float32s(v))
							f.upload(r, recv[r], float32s(make([]float32, cc.recvN(n)*count)))
						}
						what := "replay"
						if k%2 == 0 {
							what = "eager"
							err = f.group(func(r int) Call { return call(r, f.ss[r].Handle()) })
						} else {
							err = f.replay(xs)
						}
						if err != nil {
							t.Fatalf("%s %s %d: %v", cc.kind, what, k, err)
						}
						for r := range n {
							got := fromFloat32s(f.download(r, recv[r], 4*cc.recvN(n)*count))
							for i, g := range got {
								want, ok := cc.expect(n, r, i, count, in)
								if !ok {
									want = 0 // untouched
								}
								if float64(g) != want {
									t.Fatalf("%s op %d %s %d: rank %d element %d = %v, want %v", cc.kind, cc.op, what, k, r, i, g, want)
								}
							}
						}
					}
					for _, x := range xs {
						x.Close()
					}
				}
			})
		}
	}
}

// TestCaptureSendRecv: ncclSend/ncclRecv in a group under capture: the
// two ranks exchange (one send and one receive each), and a one-rank
// communicator sends to itself.
func TestCaptureSendRecv(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			const count = 3000
			f := newDevFixture(t, n, gpufake.Config{})
			send := make([]*gpu.Buffer, n)
			recv := make([]*gpu.Buffer, n)
			for r := range n {
				send[r], recv[r] = f.alloc(r, count*4, false), f.alloc(r, count*4, false)
			}
			calls := func(r int, s uintptr) []Call {
				peer := (r + 1) % n
				return []Call{
					{Kind: Send, Send: devPtr(send[r]), Count: count, Type: ncclFloat32, Root: peer, Stream: s},
					{Kind: Recv, Recv: devPtr(recv[r]), Count: count, Type: ncclFloat32, Root: peer, Stream: s},
				}
			}
			xs, err := f.captureGroup(gpu.CaptureGlobal, calls)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, x := range xs {
					x.Close()
				}
			}()
			for k := 1; k <= 3; k++ {
				for r := range n {
					v := make([]float32, count)
					for i := range v {
						v[i] = float32(r*1000 + i + k)
					}
					f.upload(r, send[r], float32s(v))
				}
				if err := f.replay(xs); err != nil {
					t.Fatal(err)
				}
				for r := range n {
					from := (r + n - 1) % n
					for i, g := range fromFloat32s(f.download(r, recv[r], 4*count)) {
						if want := float32(from*1000 + i + k); g != want {
							t.Fatalf("replay %d: rank %d element %d = %v, want %v", k, r, i, g, want)
						}
					}
				}
			}
		})
	}
}

// TestCaptureRefused: a call that cannot replay correctly fails with
// ncclInvalidUsage saying why, leaves the capture valid, and the
// communicator serves the next eager call.
func TestCaptureRefused(t *testing.T) {
	const count = 64
	f := newDevFixture(t, 2, gpufake.Config{})
	send := []*gpu.Buffer{f.alloc(0, 4*count, false), f.alloc(1, 4*count, false)}
	recv := []*gpu.Buffer{f.alloc(0, 4*count, false), f.alloc(1, 4*count, false)}
	host := make([]float32, 2*count)
	for _, tc := range []struct {
		name  string
		calls func(r int, s uintptr) []Call
		why   string
	}{
		{"host-buffers", func(r int, s uintptr) []Call {
			p := unsafe.Pointer(&host[r*count])
			return []Call{{Kind: AllReduce, Send: p, Recv: p, Count: count, Type: ncclFloat32, Stream: s}}
		}, "host buffers"},
		{"group-3-ops", func(r int, s uintptr) []Call {
			p := 1 - r
			return []Call{
				{Kind: Send, Send: devPtr(send[r]), Count: count / 2, Type: ncclFloat32, Root: p, Stream: s},
				{Kind: Send, Send: devPtr(send[r]), Count: count, Type: ncclFloat32, Root: p, Stream: s},
				{Kind: Recv, Recv: devPtr(recv[r]), Count: count, Type: ncclFloat32, Root: p, Stream: s},
			}
		}, "grouped send/recv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.captureGroup(gpu.CaptureGlobal, tc.calls)
			var e *Error
			switch {
			case err == nil:
				t.Fatal("capture accepted, want refused")
			case !errors.As(err, &e) || e.Code != InvalidUsage:
				t.Fatalf("error %v (result %v), want ncclInvalidUsage", err, ResultOf(err))
			case !strings.Contains(err.Error(), tc.why):
				t.Fatalf("error %q does not say %q", err, tc.why)
			}
			err = f.group(func(r int) Call {
				return Call{Kind: AllReduce, Send: devPtr(send[r]), Recv: devPtr(recv[r]), Count: count, Type: ncclFloat32, Stream: f.ss[r].Handle()}
			})
			if err != nil {
				t.Fatalf("eager allreduce after the refusal: %v", err)
			}
		})
	}
}

// TestCapturePreMulAndVMM: a PreMulSum allreduce (host-immediate and
// device scalars) replays through scratch of the graph's own, freed with
// the graph; buffers that cannot be IPC-exported (VMM memory) replay
// without the bounce the eager path takes.
func TestCapturePreMulAndVMM(t *testing.T) {
	const n, count = 2, 3000
	for _, tc := range []struct {
		name      string
		residence int // -1: no PreMulSum, VMM buffers
	}{{"premul-host", ScalarHostImmediate}, {"premul-device", ScalarDevice}, {"vmm", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDevFixture(t, n, gpufake.Config{})
			scale := []float32{0.5, 0.25}
			send := make([]*gpu.Buffer, n)
			recv := make([]*gpu.Buffer, n)
			ops := make([]int32, n)
			for r := range n {
				send[r], recv[r] = f.alloc(r, 4*count, tc.residence < 0), f.alloc(r, 4*count, tc.residence < 0)
				var err error
				switch tc.residence {
				case ScalarHostImmediate:
					ops[r], err = f.l.CreatePreMulSum(f.hs[r], float32s(scale[r:r+1]), 0, tc.residence, ncclFloat32)
				case ScalarDevice:
					dsc := f.alloc(r, 64, false)
					f.upload(r, dsc, float32s(scale[r:r+1]))
					ops[r], err = f.l.CreatePreMulSum(f.hs[r], nil, dsc.Ptr(), tc.residence, ncclFloat32)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			call := func(r int, s uintptr) Call {
				return Call{Kind: AllReduce, Send: devPtr(send[r]), Recv: devPtr(recv[r]), Count: count, Type: ncclFloat32, Op: ops[r], Stream: s}
			}
			// An eager call first: the flag regions and the eager scratch
			// exist before the capture, so what the graph adds is its own.
			if err := f.group(func(r int) Call { return call(r, f.ss[r].Handle()) }); err != nil {
				t.Fatal(err)
			}
			free0, _, _ := f.dvs[0].MemInfo()
			xs, err := f.captureGroup(gpu.CaptureGlobal, func(r int, s uintptr) []Call { return []Call{call(r, s)} })
			if err != nil {
				t.Fatal(err)
			}
			if free, _, _ := f.dvs[0].MemInfo(); tc.residence >= 0 && free >= free0 {
				t.Fatalf("%d bytes free after the capture, %d before: no scratch of the graph's own", free, free0)
			}
			for k := 1; k <= 4; k++ {
				in := func(r, i int) float32 { return float32((i*3+r*5+k*7)%23 - 11) }
				for r := range n {
					v := make([]float32, count)
					for i := range v {
						v[i] = in(r, i)
					}
					f.upload(r, send[r], float32s(v))
				}
				if k%2 == 0 {
					err = f.group(func(r int) Call { return call(r, f.ss[r].Handle()) })
				} else {
					err = f.replay(xs)
				}
				if err != nil {
					t.Fatalf("round %d: %v", k, err)
				}
				for r := range n {
					for i, g := range fromFloat32s(f.download(r, recv[r], 4*count)) {
						want := float64(in(0, i)) + float64(in(1, i))
						if tc.residence >= 0 {
							want = float64(scale[0])*float64(in(0, i)) + float64(scale[1])*float64(in(1, i))
						}
						if float64(g) != want {
							t.Fatalf("round %d: rank %d element %d = %v, want %v", k, r, i, g, want)
						}
					}
				}
			}
			for _, x := range xs {
				if err := x.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.residence < 0 {
				return
			}
			// The graph's scratch goes on a goroutine: poll, with a bound.
			deadline := time.Now().Add(10 * time.Second)
			for {
				free, _, _ := f.dvs[0].MemInfo()
				if free == free0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d bytes free 10 s after the graph went, want %d as before the capture", free, free0)
				}
				runtime.Gosched()
			}
		})
	}
}
