package direct

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
)

// What the direct plane does beyond two ranks: the order in which it visits
// peers, the allgather/alltoall mode it picks, and ranks that disagree on
// the flag allreduce's two-shot limit.

// TestRotated: at every step k, rank r visits peer (r+k) mod n, so the
// ranks' targets form a permutation (no GPU serves two visitors at once)
// and no rank visits itself.
func TestRotated(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		order := make([][]int, n)
		for me := range n {
			p := &directPlane{peers: &peers{n: n, me: me}}
			order[me] = p.rotated()
			if len(order[me]) != n-1 {
				t.Fatalf("n=%d rank %d: %d peers, want %d", n, me, len(order[me]), n-1)
			}
		}
		for k := 0; k < n-1; k++ {
			seen := make([]bool, n)
			for me := range n {
				j := order[me][k]
				if j == me || seen[j] {
					t.Errorf("n=%d step %d: rank %d visits %d (self, or taken by another rank)", n, k, me, j)
				}
				seen[j] = true
			}
		}
	}
}

func TestMoveSetting(t *testing.T) {
	for _, tc := range []struct {
		v           string
		n           int
		pull, store bool
		bad         bool
	}{
		{"auto", 2, false, true, false}, {"auto", 3, true, false, false}, {"auto", 8, true, false, false},
		{"store", 4, false, true, false}, {"pull", 2, true, false, false}, {"push", 4, false, false, false},
		{"", 2, false, false, false}, {"fast", 2, false, false, true},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.v, tc.n), func(t *testing.T) {
			pull, store, err := moveSetting(tc.v, "FLEXLINK_GPU_ALLGATHER", tc.n)
			if (err != nil) != tc.bad || !tc.bad && (pull != tc.pull || store != tc.store) {
				t.Errorf("pull %v store %v err %v; want pull %v store %v, error %v", pull, store, err, tc.pull, tc.store, tc.bad)
			}
		})
	}
}

// TestGPUFakeFlagSettingsDisagree: when one rank's flag settings differ
// from the others' (here the two-shot limit), every rank turns the flag
// plane off at setup, instead of running kernels that would not match, and
// the collectives still give the right answers over the handshake paths.
func TestGPUFakeFlagSettingsDisagree(t *testing.T) {
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_CHUNK_BYTES": "65536"}
	each := map[int]map[string]string{2: {"FLEXLINK_GPU_FLAG_ONESHOT_BYTES": "4096"}}
	rs := fakeRanksEach(t, 3, gpufake.Config{}, env, each, 3*fakeBig*8)
	for _, r := range rs {
		if f := r.dc.Plane().(*directPlane).flag; f != nil {
			t.Fatalf("rank %d: flag plane on (one-shot limit %d) though rank 2 has another limit", r.c.Rank(), f.State().OneShot)
		}
	}
	cases := []devCase{}
	for _, c := range devCases(3, fakeBig) {
		if c.kind == plane.AllReduce {
			cases = append(cases, c)
		}
	}
	sweep(t, rs, cases)
}

// TestGPUFakeFlagAuto: the flag plane's automatic limits by rank count.
func TestGPUFakeFlagAuto(t *testing.T) {
	for _, n := range []int{2, 3} {
		rs := fakeRanks(t, n, gpufake.Config{}, map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1"}, 1<<16)
		f := rs[0].dc.Plane().(*directPlane).flag
		if f == nil {
			t.Fatalf("%d ranks: no flag plane", n)
		}
		if st := f.State(); st.MaxBytes < 1<<40 || st.CollBytes != 16<<20 || st.OneShot != 2<<20 {
			t.Errorf("%d ranks: flag plane %+v, want every allreduce, 16 MiB per peer block, two-shot over 2 MiB", n, st)
		}
	}
}

// TestGPUFakeTwoShot: beyond two ranks an allreduce over the one-shot
// limit runs as the two-shot kernels (their count says so; the results are
// checked by the sweeps), one whose blocks round to nothing runs its tail
// alone, and a rank that calls a reduce-scatter while the others make a
// two-shot allreduce of the same blocks is caught at once (the parts carry
// kinds of their own), not after the kernel timeout.
func TestGPUFakeTwoShot(t *testing.T) {
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_ONESHOT_BYTES": "16",
		"FLEXLINK_GPU_KERNEL_TIMEOUT": "20s"}
	rs := fakeRanks(t, 3, gpufake.Config{}, env, 3*4096*4)
	sweep(t, rs, []devCase{{kind: plane.AllReduce, count: 7, dt: dtype.Float32, op: dtype.Sum},
		{kind: plane.AllReduce, count: 3*64 + 5, dt: dtype.Float32, op: dtype.Avg}})
	for _, r := range rs {
		if f := r.dc.Plane().(*directPlane).flag; f.State().TwoShots != 2 {
			t.Errorf("rank %d: %d two-shot allreduces, want 2", r.c.Rank(), f.State().TwoShots)
		}
	}
	ctx := testCtx(t, 30*time.Second)
	start := time.Now()
	got := settleOn(rs, func(r *devRank) error {
		if r.c.Rank() == 0 {
			return r.dc.AllReduce(ctx, r.a.Sub(0, 3*1024*4), r.b.Sub(0, 3*1024*4), 3*1024, dtype.Float32, dtype.Sum, r.s)
		}
		return r.dc.ReduceScatter(ctx, r.a.Sub(0, 3*1024*4), r.b.Sub(0, 1024*4), 1024, dtype.Float32, dtype.Sum, r.s)
	})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the mismatch took %v to show (a timeout, not the signature check)", d)
	}
	mismatch := false
	for r, err := range got {
		if err == nil {
			t.Errorf("rank %d: no error", r)
		}
		mismatch = mismatch || errors.Is(err, errs.ErrMismatch)
	}
	if !mismatch {
		t.Errorf("no rank reports ErrMismatch: %v", got)
	}
}

// TestGPUFakeFlagBadLimits: a flag limit below -1 fails the setup on
// every rank, naming the setting.
func TestGPUFakeFlagBadLimits(t *testing.T) {
	for _, name := range []string{"FLEXLINK_GPU_FLAG_BYTES", "FLEXLINK_GPU_FLAG_COLL_BYTES", "FLEXLINK_GPU_FLAG_ONESHOT_BYTES"} {
		t.Run(name, func(t *testing.T) {
			for r, err := range fakeSetupErrors(t, map[string]string{name: "-2"}) {
				if err == nil || !strings.Contains(err.Error(), name+"=") || !strings.Contains(err.Error(), "-2") {
					t.Errorf("rank %d: %v, want an error naming %s and its value -2", r, err, name)
				}
			}
		})
	}
}

// TestGPUFakeTwoShotLaunchFault: rank 1's second kernel of a two-shot
// allreduce fails to launch after its first has run. Rank 1's call fails
// with the driver's error; ranks 0 and 2, whose allgather kernels wait for
// rank 1's blocks, end with an error naming rank 1 soon after (the job
// aborts), not at the kernel timeout; and every rank closes.
func TestGPUFakeTwoShotLaunchFault(t *testing.T) {
	var mu sync.Mutex
	failed := false
	cfg := gpufake.Config{LaunchFault: func(dev int, name string) error {
		mu.Lock()
		defer mu.Unlock()
		if dev == 1 && name == gpu.FlagGatherKernelName && !failed {
			failed = true
			return errors.New("injected")
		}
		return nil
	}}
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_ONESHOT_BYTES": "16",
		"FLEXLINK_GPU_KERNEL_TIMEOUT": "60s"}
	rs := fakeRanks(t, 3, cfg, env, 3*4096*4)
	ctx := testCtx(t, 30*time.Second)
	start := time.Now()
	const count = 3*64 + 5 // a block of 64 elements per rank, and a tail
	got := settleOn(rs, func(r *devRank) error {
		return r.dc.AllReduce(ctx, r.a.Sub(0, count*4), r.b.Sub(0, count*4), count, dtype.Float32, dtype.Sum, r.s)
	})
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the failure took %v to reach every rank (the kernel timeout, not the abort)", d)
	}
	for r, err := range got {
		t.Logf("rank %d: %v", r, err)
	}
	if !failed {
		t.Fatal("no launch failed: the two-shot path was not taken")
	}
	if err := got[1]; err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") {
		t.Errorf("rank 1: %v, want the launch's driver error", err)
	}
	for _, r := range []int{0, 2} {
		if err := got[r]; err == nil || !strings.Contains(err.Error(), "rank 1 on fakehost") {
			t.Errorf("rank %d: %v, want an error naming rank 1 on fakehost", r, err)
		}
	}
	again := onRanks(rs, func(r *devRank) error { // a later call fails on every rank
		return r.dc.AllReduce(ctx, r.a.Sub(0, count*4), r.b.Sub(0, count*4), count, dtype.Float32, dtype.Sum, r.s)
	})
	for r, err := range again {
		if err == nil {
			t.Errorf("rank %d: a call after the failure succeeded", r)
		}
	}
}
