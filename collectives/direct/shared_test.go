package direct

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
)

func TestSharedGPU(t *testing.T) {
	for _, c := range []struct {
		bus    []string
		r1, r2 int
		ok     bool
	}{
		{[]string{"0000:18:00.0", "0000:2a:00.0"}, 0, 0, false},
		{[]string{"0000:18:00.0", "0000:18:00.0"}, 0, 1, true},
		{[]string{"0000:18:00.0", "0000:2a:00.0", "0000:2A:00.0", "0000:18:00.0"}, 1, 2, true},
		{nil, 0, 0, false},
	} {
		r1, r2, ok := SharedGPU(c.bus)
		if ok != c.ok || ok && (r1 != c.r1 || r2 != c.r2) {
			t.Errorf("SharedGPU(%v) = %d, %d, %v; want %d, %d, %v", c.bus, r1, r2, ok, c.r1, c.r2, c.ok)
		}
	}
}

// sharedRanks starts n ranks on one fake GPU with env.
func sharedRanks(t *testing.T, n int, cfg gpufake.Config, env map[string]string, bufBytes int) []*devRank {
	t.Helper()
	return fakeRanksOn(t, n, 1, cfg, env, nil, bufBytes)
}

// TestRanksPerGPU: the most ranks on one GPU, bus ids compared without
// case (their flag kernels split its SMs).
func TestRanksPerGPU(t *testing.T) {
	for _, c := range []struct {
		bus  []string
		want int
	}{
		{[]string{"0000:18:00.0", "0000:2a:00.0"}, 1},
		{[]string{"0000:18:00.0", "0000:18:00.0", "0000:18:00.0", "0000:18:00.0"}, 4},
		{[]string{"0000:18:00.0", "0000:2a:00.0", "0000:2A:00.0", "0000:18:00.0", "0000:2a:00.0"}, 3},
		{nil, 0},
	} {
		if got := ranksPerGPU(c.bus); got != c.want {
			t.Errorf("ranksPerGPU(%v) = %d, want %d", c.bus, got, c.want)
		}
	}
}

// tracePlanes records every IPC event record and wait of the ranks' planes.
func tracePlanes(rs []*devRank) func() int {
	var mu sync.Mutex
	recs := 0
	for _, r := range rs {
		r.dc.Plane().(*directPlane).trace = func(traceRec) {
			mu.Lock()
			recs++
			mu.Unlock()
		}
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return recs
	}
}

// TestGPUFakeSharedLeader: ranks that all share one GPU take the leader
// path: every collective (in place too, all-to-all included) matches the
// float64 reference, and no IPC event is recorded or waited on (the path
// takes no GPU dependency across processes). With
// FLEXLINK_GPU_SHARED=events the same sweep takes the event protocol.
func TestGPUFakeSharedLeader(t *testing.T) {
	const big = 20_000
	for _, tc := range []struct {
		n      int
		shared string
	}{{2, ""}, {3, ""}, {4, ""}, {2, "events"}} {
		t.Run(fmt.Sprintf("%dranks-%s", tc.n, tc.shared), func(t *testing.T) {
			env := map[string]string{}
			if tc.shared != "" {
				env["FLEXLINK_GPU_SHARED"] = tc.shared
			}
			rs := sharedRanks(t, tc.n, gpufake.Config{}, env, tc.n*big*8)
			leader := tc.shared == ""
			for _, r := range rs {
				p := r.dc.Plane().(*directPlane)
				if (p.shared != nil) != leader || p.flag != nil {
					t.Fatalf("rank %d: leader path %v, flag kernels %v; want leader %v, no flag kernels", r.c.Rank(), p.shared != nil, p.flag != nil, leader)
				}
			}
			recs := tracePlanes(rs)
			sweep(t, rs, devCases(tc.n, big))
			if got := recs(); leader && got != 0 {
				t.Errorf("leader path: %d IPC event records and waits, want none", got)
			} else if !leader && got == 0 {
				t.Errorf("events: no IPC event records or waits")
			}
		})
	}
}

// TestGPUFakeSharedMPS: ranks that share one GPU through CUDA MPS (the
// fake's devices report CU_DEVICE_ATTRIBUTE_MPS_ENABLED). With
// FLEXLINK_GPU_SHARED=auto the leader path gives way to the paths of
// separate GPUs: the flag kernels take eager calls (every rank's flag call
// count grows) and the sweep matches the float64 reference; with leader
// the leader path stays and the flag kernels are no longer for captures
// only.
func TestGPUFakeSharedMPS(t *testing.T) {
	const big = 20_000
	for _, tc := range []struct {
		n      int
		shared string
		leader bool
	}{{2, "auto", false}, {3, "auto", false}, {4, "auto", false}, {2, "leader", true}} {
		t.Run(fmt.Sprintf("%dranks-%s", tc.n, tc.shared), func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_SHARED": tc.shared, "FLEXLINK_GPU_FLAG_BYTES": "-1"}
			rs := sharedRanks(t, tc.n, gpufake.Config{MPS: true}, env, tc.n*big*8)
			for _, r := range rs {
				p := r.dc.Plane().(*directPlane)
				if p.flag == nil {
					t.Fatalf("rank %d: no flag kernels", r.c.Rank())
				}
				if (p.shared != nil) != tc.leader || p.flag.State().CaptureOnly {
					t.Fatalf("rank %d: leader path %v, flag kernels for captures only %v; want leader %v, eager flag calls",
						r.c.Rank(), p.shared != nil, p.flag.State().CaptureOnly, tc.leader)
				}
			}
			sweep(t, rs, devCases(tc.n, big))
			for _, r := range rs {
				if calls := r.dc.Plane().(*directPlane).flag.State().Calls; !tc.leader && calls == 0 {
					t.Errorf("rank %d: no eager call took the flag kernels under MPS", r.c.Rank())
				}
			}
		})
	}
}

// TestGPUFakeSharedGroupAndV: on the leader path, AllToAllv with uneven
// counts (one call on the leader) and Group calls (the event protocol)
// interleave on one plane.
func TestGPUFakeSharedGroupAndV(t *testing.T) {
	const n, elems = 3, 5000
	rs := sharedRanks(t, n, gpufake.Config{}, nil, 4*elems*4)
	ctx := testCtx(t, 30*time.Second)
	for round := 0; round < 3; round++ {
		errs := onRanks(rs, func(r *devRank) error {
			if err := allToAllvRound(ctx, r, round, false); err != nil {
				return err
			}
			if err := groupRound(ctx, r, elems); err != nil {
				return err
			}
			return allToAllvRound(ctx, r, round, true)
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d: rank %d: %v", round, r, err)
			}
		}
	}
}

// vCount is how many int32 elements rank s sends rank d in round k.
func vCount(s, d, k int) int { return (s*7+d*3+k*5)%11*37 + (s+d)%2 }

// allToAllvRound runs one AllToAllv of int32 with vCount's uneven counts
// (in place: one buffer, when the send and recv totals allow) and checks
// every element of recv.
func allToAllvRound(ctx context.Context, r *devRank, k int, inPlace bool) error {
	n, me := r.c.Size(), r.c.Rank()
	sc, rc := make([]int, n), make([]int, n)
	ts, tr := 0, 0
	for j := 0; j < n; j++ {
		sc[j], rc[j] = vCount(me, j, k), vCount(j, me, k)
		ts, tr = ts+sc[j], tr+rc[j]
	}
	host := make([]byte, 4*ts)
	at := 0
	for j := 0; j < n; j++ {
		for i := 0; i < sc[j]; i++ {
			dtype.Put(host, at, dtype.Int32, float64(me*100000+j*1000+i))
			at++
		}
	}
	send, recv := r.a.Sub(0, 4*ts), r.b.Sub(0, 4*tr)
	if inPlace {
		recv = r.a.Sub(0, 4*tr)
	}
	if err := r.s.Memset(r.b, 0xEE); err != nil {
		return err
	}
	if err := r.s.CopyHtoD(send, host); err != nil {
		return err
	}
	if err := r.dc.AllToAllv(ctx, send, recv, sc, rc, dtype.Int32, r.s); err != nil {
		return fmt.Errorf("alltoallv round %d (in place %v): %w", k, inPlace, err)
	}
	out := make([]byte, 4*tr)
	if err := r.s.CopyDtoH(out, recv); err != nil {
		return err
	}
	if err := r.s.Synchronize(); err != nil {
		return err
	}
	at = 0
	for j := 0; j < n; j++ {
		for i := 0; i < rc[j]; i++ {
			if got, want := dtype.Get(out, at, dtype.Int32), float64(j*100000+me*1000+i); got != want {
				return fmt.Errorf("alltoallv round %d (in place %v): element %d from rank %d = %v, want %v", k, inPlace, i, j, got, want)
			}
			at++
		}
	}
	return nil
}

// TestGPUFakeSharedMismatch: ranks that disagree on the leader path end
// with ErrMismatch on every rank, within the deadline: different counts, and
// AllToAllv counts that do not pair up (the leader finds it and tells every
// rank).
func TestGPUFakeSharedMismatch(t *testing.T) {
	rs := sharedRanks(t, 3, gpufake.Config{}, nil, 1<<16)
	ctx := testCtx(t, 20*time.Second)
	errs2 := onRanks(rs, func(r *devRank) error {
		return r.dc.AllReduce(ctx, r.a, r.b, 100+r.c.Rank(), dtype.Float32, dtype.Sum, r.s)
	})
	for r, err := range errs2 {
		if !errors.Is(err, errs.ErrMismatch) {
			t.Errorf("allreduce counts differ: rank %d: %v, want ErrMismatch", r, err)
		}
	}
}

// TestGPUFakeSharedLeaderFault: a kernel launch that fails on the leader
// ends the call on every rank within the deadline, each error naming the
// driver's error and (off the leader) the leader; the communicator is then
// broken on every rank (a later call fails at once, as after any failed
// GPU call).
func TestGPUFakeSharedLeaderFault(t *testing.T) {
	var failed atomic.Bool
	cfg := gpufake.Config{LaunchFault: func(dev int, name string) error {
		if name == gpu.ReduceKernelName(dtype.Float32, dtype.Sum) && failed.CompareAndSwap(false, true) {
			return errors.New("injected")
		}
		return nil
	}}
	rs := sharedRanks(t, 3, cfg, nil, 1<<16)
	ctx := testCtx(t, 20*time.Second)
	call := func(r *devRank) error {
		return r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s)
	}
	for r, err := range onRanks(rs, call) {
		switch {
		case err == nil:
			t.Errorf("rank %d: the failed call succeeded", r)
		case !strings.Contains(err.Error(), "launch flexlink_reduce_sum_f32"):
			t.Errorf("rank %d: %v, want the driver's error", r, err)
		case r != 0 && !strings.Contains(err.Error(), "leader rank 0"):
			t.Errorf("rank %d: %v, want the leader named", r, err)
		}
	}
	for r, err := range onRanks(rs, call) {
		if err == nil || !strings.Contains(err.Error(), "broken communicator") {
			t.Errorf("rank %d: the next call: %v, want the broken communicator", r, err)
		}
	}
}
