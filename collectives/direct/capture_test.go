package direct

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/flagplane"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// CUDA graph capture on the fake driver (capture.go): every collective the
// capture path serves is captured once per rank on a stream of its own,
// then replayed on the rank's main stream with new inputs each time,
// between eager calls of the same collective (with other inputs again), and
// every output is checked against the float64 reference.

// captureCases are the calls captured: every collective, in and out of
// place, one element to several chunks per block, and sizes past the eager
// flag limits (FLEXLINK_GPU_FLAG_COLL_BYTES is small in the tests, so the
// eager calls of those sizes take the handshake paths while the replays
// take the flag kernels).
func captureCases(n, big int) []devCase {
	var cs []devCase
	for _, count := range []int{1, 7, 4099, big} {
		for _, inPlace := range []bool{false, true} {
			cs = append(cs,
				devCase{kind: plane.AllReduce, count: count, dt: dtype.Float32, op: dtype.Sum, inPlace: inPlace},
				devCase{kind: plane.AllGather, count: count, dt: dtype.Float32, inPlace: inPlace},
				devCase{kind: plane.ReduceScatter, count: count, dt: dtype.Float32, op: dtype.Max, inPlace: inPlace},
				devCase{kind: plane.Broadcast, count: count, dt: dtype.Int8, root: n - 1, inPlace: inPlace},
				devCase{kind: plane.Reduce, count: count, dt: dtype.BFloat16, op: dtype.Sum, root: n / 2, inPlace: inPlace},
			)
		}
		cs = append(cs, devCase{kind: plane.AllToAll, count: count, dt: dtype.Int32},
			devCase{kind: plane.AllToAll, count: count, dt: dtype.Int32, inPlace: true})
	}
	return append(cs,
		devCase{kind: plane.AllReduce, count: 1003, dt: dtype.Int32, op: dtype.Prod},
		devCase{kind: plane.AllReduce, count: 1003, dt: dtype.Float16, op: dtype.Avg},
		devCase{kind: plane.AllReduce, count: 1003, dt: dtype.Float64, op: dtype.Min},
		devCase{kind: plane.ReduceScatter, count: 4097, dt: dtype.Float16, op: dtype.Avg})
}

// captured is one rank's graph of one call.
type captured struct {
	g *gpu.Graph
	x *gpu.GraphExec
}

func (c *captured) close() error {
	return errors.Join(c.x.Close(), c.g.Close())
}

// captureCall captures call on a new stream of r's device in mode m and
// instantiates the graph.
func captureCall(r *devRank, m gpu.CaptureMode, call func(s *gpu.Stream) error) (*captured, error) {
	cs, err := r.s.Device().NewStream()
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	// A thread-local capture must end on the thread that began it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cs.BeginCapture(m); err != nil {
		return nil, err
	}
	cerr := call(cs)
	g, err := cs.EndCapture()
	if err := errors.Join(cerr, err); err != nil {
		if g != nil {
			g.Close()
		}
		return nil, err
	}
	x, err := g.Instantiate()
	if err != nil {
		g.Close()
		return nil, err
	}
	return &captured{g: g, x: x}, nil
}

func TestGPUFakeCapture(t *testing.T) {
	for _, tc := range []struct {
		n      int
		blocks string
		region string
		mode   gpu.CaptureMode
	}{
		{1, "", "", gpu.CaptureGlobal},
		{2, "3", "262144", gpu.CaptureGlobal}, // a small region: slots wrap many times in a call
		{3, "5", "1048576", gpu.CaptureThreadLocal},
		{4, "", "", gpu.CaptureRelaxed},
		{8, "", "", gpu.CaptureGlobal}, // the flag kernels' most ranks
	} {
		t.Run(fmt.Sprintf("%dranks-%s", tc.n, tc.mode), func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_COLL_BYTES": "4096",
				"FLEXLINK_GPU_FLAG_ONESHOT_BYTES": "1024"} // beyond two ranks, allreduces over 1 KiB replay two-shot
			if tc.blocks != "" {
				env["FLEXLINK_GPU_FLAG_BLOCKS"], env["FLEXLINK_GPU_FLAG_REGION_BYTES"] = tc.blocks, tc.region
			}
			big := 40_000
			if tc.n == 8 {
				big = 5000 // 2 cores: eight ranks of goroutines
			}
			rs := fakeRanks(t, tc.n, gpufake.Config{}, env, tc.n*big*8)
			ctx := testCtx(t, 120*time.Second)
			for _, c := range captureCases(tc.n, big) {
				replayCase(ctx, t, rs, c, tc.mode)
			}
			for _, r := range rs {
				if f := r.dc.Plane().(*directPlane).flag; f != nil {
					if st := f.State(); st.Graphs != 0 || st.Kept != 0 {
						t.Errorf("rank %d: %d graphs still hold the flag memory (%d frees kept) after every graph was destroyed", r.c.Rank(), st.Graphs, st.Kept)
					}
				}
			}
		})
	}
}

// replayCase runs captureRounds of c on every rank at once and fails on
// any error or wrong element.
func replayCase(ctx context.Context, t *testing.T, rs []*devRank, c devCase, m gpu.CaptureMode) {
	t.Helper()
	checkRanks(t, rs, c, " over the rounds", func(r *devRank) (int, error) { return captureRounds(ctx, r, c, m, 5) })
}

// captureRounds is one rank's side of a capture case (every rank runs it
// at once): it captures c in mode m on a stream of its own, then runs
// rounds rounds on r.s, each with new inputs, a replay in the odd ones and
// an eager call of c in the even ones, and returns how many elements were
// wrong over all of them.
func captureRounds(ctx context.Context, r *devRank, c devCase, m gpu.CaptureMode, rounds int) (wrong int, err error) {
	send, recv, _, err := prepDevCase(r, c)
	if err != nil {
		return 0, err
	}
	if err := r.s.Synchronize(); err != nil {
		return 0, err
	}
	g, err := captureCall(r, m, func(s *gpu.Stream) error { return callDev(ctx, r.dc, c, send, recv, s) })
	if err != nil {
		return 0, fmt.Errorf("capture: %w", err)
	}
	defer g.close()
	for k := 1; k <= rounds; k++ {
		v := c
		v.shift = 3 * k
		s2, r2, host, err := prepDevCase(r, v)
		if err != nil {
			return wrong, err
		}
		if s2.Ptr() != send.Ptr() || r2.Ptr() != recv.Ptr() {
			return wrong, fmt.Errorf("the case's buffers moved between capture and replay (test)")
		}
		what := "replay"
		if k%2 == 0 {
			what = "eager call"
			err = callDev(ctx, r.dc, v, send, recv, r.s)
		} else {
			err = g.x.Launch(r.s)
		}
		if err != nil {
			return wrong, fmt.Errorf("%s %d: %w", what, k, err)
		}
		w, err := checkDevCase(r, v, send, recv, host)
		if err != nil {
			return wrong, fmt.Errorf("%s %d: %w", what, k, err)
		}
		if w != 0 {
			fmt.Printf("rank %d %v: %s %d: %d wrong elements\n", r.c.Rank(), v, what, k, w)
		}
		wrong += w
	}
	return wrong, nil
}

// TestGPUFakeCaptureGroup: grouped send/recv under capture on two ranks:
// one send or receive (rank 0 to 1 and back), and an exchange (one send
// and one receive of the same size), replayed with new data between eager
// calls.
func TestGPUFakeCaptureGroup(t *testing.T) {
	const elems = 50_000 // several chunks per block with the small region
	rs := fakeRanks(t, 2, gpufake.Config{}, map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_COLL_BYTES": "4096",
		"FLEXLINK_GPU_FLAG_BLOCKS": "3", "FLEXLINK_GPU_FLAG_REGION_BYTES": "262144"}, elems*8)
	ctx := testCtx(t, 60*time.Second)
	for _, shape := range []string{"send0to1", "send1to0", "exchange"} {
		t.Run(shape, func(t *testing.T) {
			n := elems * 4
			// ops: what rank r enqueues; the message it sends is a, the one
			// it receives lands in b.
			ops := func(r *devRank) []plane.P2P {
				me := r.c.Rank()
				peer := 1 - me
				switch {
				case shape == "exchange":
					return []plane.P2P{plane.SendTo(peer, r.a.Sub(0, n)), plane.RecvFrom(peer, r.b.Sub(0, n))}
				case (shape == "send0to1") == (me == 0):
					return []plane.P2P{plane.SendTo(peer, r.a.Sub(0, n))}
				}
				return []plane.P2P{plane.RecvFrom(peer, r.b.Sub(0, n))}
			}
			receives := func(me int) bool {
				return shape == "exchange" || (shape == "send0to1") == (me == 1)
			}
			fill := func(me, k int) []byte {
				h := make([]byte, n)
				for i := range h {
					h[i] = byte(me*7 + i*3 + k*11)
				}
				return h
			}
			graphs := make([]*captured, 2)
			errs := onRanks(rs, func(r *devRank) (err error) {
				graphs[r.c.Rank()], err = captureCall(r, gpu.CaptureGlobal, func(s *gpu.Stream) error { return r.dc.Group(ctx, s, ops(r)...) })
				return err
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("capture on rank %d: %v", r, err)
				}
			}
			defer onRanks(rs, func(r *devRank) error { return graphs[r.c.Rank()].close() })
			for k := 1; k <= 4; k++ {
				errs := onRanks(rs, func(r *devRank) error {
					me := r.c.Rank()
					if err := r.s.CopyHtoD(r.a.Sub(0, n), fill(me, k)); err != nil {
						return err
					}
					if err := r.s.Memset(r.b, 0xEE); err != nil {
						return err
					}
					var err error
					if k%2 == 0 {
						err = r.dc.Group(ctx, r.s, ops(r)...)
					} else {
						err = graphs[me].x.Launch(r.s)
					}
					if err != nil {
						return err
					}
					got := make([]byte, n)
					if err := r.s.CopyDtoH(got, r.b.Sub(0, n)); err != nil {
						return err
					}
					if err := r.s.Synchronize(); err != nil {
						return err
					}
					want := fill(1-me, k)
					if !receives(me) {
						for i := range want {
							want[i] = 0xEE
						}
					}
					for i := range got {
						if got[i] != want[i] {
							return fmt.Errorf("round %d: byte %d = %#x, want %#x", k, i, got[i], want[i])
						}
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
			}
		})
	}
}

// TestGPUFakeCaptureRefused: calls that cannot replay correctly are
// refused on a capturing stream with an error that says what and why
// (wrapping plane.ErrNotCapturable); the capture stays valid, and the
// communicator serves the next call.
func TestGPUFakeCaptureRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		env  map[string]string
		call func(ctx context.Context, r *devRank, s *gpu.Stream) error
		why  string
	}{
		{"flag-off", 2, map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "0"}, func(ctx context.Context, r *devRank, s *gpu.Stream) error {
			return r.dc.AllReduce(ctx, r.a.Sub(0, 64), r.b.Sub(0, 64), 16, dtype.Float32, dtype.Sum, s)
		}, "flag kernels are off"},
		{"group-3-ops", 2, nil, func(ctx context.Context, r *devRank, s *gpu.Stream) error {
			p := 1 - r.c.Rank()
			return r.dc.Group(ctx, s, plane.SendTo(p, r.a.Sub(0, 64)), plane.SendTo(p, r.a.Sub(64, 64)), plane.RecvFrom(p, r.b.Sub(0, 64)))
		}, "grouped send/recv"},
		{"send-3-ranks", 3, nil, func(ctx context.Context, r *devRank, s *gpu.Stream) error {
			return r.dc.Group(ctx, s, plane.SendTo((r.c.Rank()+1)%3, r.a.Sub(0, 64)), plane.RecvFrom((r.c.Rank()+2)%3, r.b.Sub(0, 64)))
		}, "two-rank communicator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1"}
			for k, v := range tc.env {
				env[k] = v
			}
			rs := fakeRanks(t, tc.n, gpufake.Config{}, env, 1<<16)
			ctx := testCtx(t, 60*time.Second)
			errs := onRanks(rs, func(r *devRank) error {
				cs, err := r.s.Device().NewStream()
				if err != nil {
					return err
				}
				defer cs.Close()
				if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
					return err
				}
				cerr := tc.call(ctx, r, cs)
				g, err := cs.EndCapture()
				if err != nil {
					return fmt.Errorf("the refusal invalidated the capture: %w", err)
				}
				g.Close()
				switch {
				case cerr == nil:
					return fmt.Errorf("call on a capturing stream accepted, want refused")
				case !errors.Is(cerr, plane.ErrNotCapturable):
					return fmt.Errorf("error does not wrap ErrNotCapturable: %w", cerr)
				case !strings.Contains(cerr.Error(), tc.why):
					return fmt.Errorf("error %q does not say %q", cerr, tc.why)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			sweep(t, rs, []devCase{{kind: plane.AllReduce, count: 1000, dt: dtype.Float32, op: dtype.Sum}})
		})
	}
}

// TestGPUFakeCaptureLifetime: a graph destroyed while its communicator
// lives gives its hold back at once; a communicator closed while a graph
// lives hands its flag memory to the graph, which frees it when destroyed.
func TestGPUFakeCaptureLifetime(t *testing.T) {
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1"}
	c := devCase{kind: plane.AllReduce, count: 1000, dt: dtype.Float32, op: dtype.Sum}
	capture := func(t *testing.T, rs []*devRank) []*captured {
		ctx := testCtx(t, 30*time.Second)
		graphs := make([]*captured, len(rs))
		errs := onRanks(rs, func(r *devRank) (err error) {
			send, recv := r.a.Sub(0, 4000), r.b.Sub(0, 4000)
			graphs[r.c.Rank()], err = captureCall(r, gpu.CaptureGlobal, func(s *gpu.Stream) error { return callDev(ctx, r.dc, c, send, recv, s) })
			return err
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return graphs
	}
	held := func(r *devRank) (int, int) { st := r.dc.Plane().(*directPlane).flag.State(); return st.Graphs, st.Kept }

	t.Run("graph-first", func(t *testing.T) {
		rs := fakeRanks(t, 2, gpufake.Config{}, env, 1<<16)
		graphs := capture(t, rs)
		for _, r := range rs {
			if g, _ := held(r); g != 1 {
				t.Fatalf("rank %d: %d graphs hold the flag memory, want 1", r.c.Rank(), g)
			}
		}
		for i, g := range graphs {
			if err := g.close(); err != nil {
				t.Fatalf("rank %d: %v", i, err)
			}
		}
		for _, r := range rs {
			if g, k := held(r); g != 0 || k != 0 {
				t.Errorf("rank %d: %d graphs, %d kept frees after the graph was destroyed, want none", r.c.Rank(), g, k)
			}
		}
		sweep(t, rs, []devCase{c}) // the communicator is unharmed
	})

	t.Run("comm-first", func(t *testing.T) {
		rs := fakeRanks(t, 2, gpufake.Config{}, env, 1<<16)
		free0 := make([]uint64, 2)
		for _, r := range rs {
			free0[r.c.Rank()], _, _ = r.s.Device().MemInfo()
		}
		graphs := capture(t, rs)
		flags := make([]*flagplane.Plane, 2)
		for _, r := range rs {
			flags[r.c.Rank()] = r.dc.Plane().(*directPlane).flag
		}
		errs := onRanks(rs, func(r *devRank) error { return r.dc.Close(context.Background()) })
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: close: %v", r, err)
			}
		}
		for i, f := range flags {
			if st := f.State(); st.Graphs != 1 || st.Kept == 0 {
				t.Fatalf("rank %d: after close %d graphs hold the memory with %d frees kept, want 1 and some", i, st.Graphs, st.Kept)
			}
			if free, _, _ := rs[i].s.Device().MemInfo(); free >= free0[i] {
				t.Fatalf("rank %d: %d bytes free after close with a live graph, %d before the first call: the regions went", i, free, free0[i])
			}
		}
		freed := make([]<-chan struct{}, 2)
		for i, f := range flags {
			if freed[i] = f.GraphsFreed(); freed[i] == nil {
				t.Fatalf("rank %d: nothing kept for the graph", i)
			}
		}
		for i, g := range graphs {
			if err := g.close(); err != nil {
				t.Fatalf("rank %d: %v", i, err)
			}
		}
		// The destructor frees on a goroutine: wait for it, within a deadline.
		for i := range flags {
			select {
			case <-freed[i]:
			case <-time.After(20 * time.Second):
				t.Fatalf("rank %d: the graph's destruction did not free the kept memory", i)
			}
			if free, _, _ := rs[i].s.Device().MemInfo(); free != free0[i] {
				t.Errorf("rank %d: %d bytes free after the graph went, want %d (the regions were not freed)", i, free, free0[i])
			}
		}
	})
}

// TestGPUFakeCaptureShared: ranks that share one GPU run eager calls on
// the leader path (or the event protocol) and captured calls on the flag
// kernels, which they keep for captures only: every capture case replays
// right between eager calls, and no eager call takes a flag kernel.
func TestGPUFakeCaptureShared(t *testing.T) {
	for _, tc := range []struct {
		n      int
		shared string
	}{{2, "leader"}, {3, "leader"}, {2, "events"}} {
		t.Run(fmt.Sprintf("%dranks-%s", tc.n, tc.shared), func(t *testing.T) {
			const big = 20_000
			rs := sharedRanks(t, tc.n, gpufake.Config{}, map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_SHARED": tc.shared}, tc.n*big*8)
			for _, r := range rs {
				if f := r.dc.Plane().(*directPlane).flag; f == nil || !f.State().CaptureOnly {
					t.Fatalf("rank %d: flag plane %v, want one for captures only", r.c.Rank(), f != nil)
				}
			}
			ctx := testCtx(t, 120*time.Second)
			for _, c := range captureCases(tc.n, big) {
				replayCase(ctx, t, rs, c, gpu.CaptureGlobal)
			}
			for _, r := range rs {
				if f := r.dc.Plane().(*directPlane).flag; f.State().Calls != 0 {
					t.Errorf("rank %d: %d eager calls took the flag kernels on a shared GPU", r.c.Rank(), f.State().Calls)
				}
			}
		})
	}
}
