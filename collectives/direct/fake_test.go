package direct

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/collectives/flagplane"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

// Device collectives on the fake driver: ranks are goroutines of this
// process, each with its own fake GPU of one shared fake driver (which, unlike
// libcuda, lets a process open its own IPC handles). Fake streams run every
// operation when it is enqueued, so what these tests check is the protocol:
// that a rank touches a peer's buffer only after the peer's "ready" message
// (the peer's earlier writes are then in place), the data movement of every
// algorithm, the choice of plane, and failures.

// fakeRanks starts n ranks on a fake driver with env settings, each with a
// DeviceComm on GPU r and test buffers of bufBytes.
func fakeRanks(t *testing.T, n int, cfg gpufake.Config, env map[string]string, bufBytes int) []*devRank {
	t.Helper()
	return fakeRanksEach(t, n, cfg, env, nil, bufBytes)
}

// fakeRanksEach is fakeRanks where rank r's settings are env overridden by
// each[r] (when each has an entry for r): ranks that disagree.
func fakeRanksEach(t *testing.T, n int, cfg gpufake.Config, env map[string]string, each map[int]map[string]string, bufBytes int) []*devRank {
	t.Helper()
	return fakeRanksOn(t, n, n, cfg, env, each, bufBytes)
}

// fakeRanksOn is fakeRanksEach on gpus fake GPUs: rank r on GPU r%gpus
// (gpus < n: ranks sharing a GPU).
func fakeRanksOn(t *testing.T, n, gpus int, cfg gpufake.Config, env map[string]string, each map[int]map[string]string, bufBytes int) []*devRank {
	t.Helper()
	// The PCIe planners' profiles go to a directory of the test's own, so
	// a run neither reads nor leaves anything in the user's cache.
	env = maps.Clone(env)
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["FLEXLINK_CACHE_DIR"]; !ok {
		env["FLEXLINK_CACHE_DIR"] = t.TempDir()
	}
	// A fake flag kernel that waits for nothing fails in a minute, not
	// after the default ten.
	if _, ok := env["FLEXLINK_GPU_KERNEL_TIMEOUT"]; !ok {
		env["FLEXLINK_GPU_KERNEL_TIMEOUT"] = "60s"
	}
	// The fake-driver suites were written for the copy-engine pushes (the
	// path that takes the PCIe share) and the handshake allreduce; the pull
	// and flag tests ask for theirs.
	for k, v := range map[string]string{"FLEXLINK_GPU_ALLGATHER": "push", "FLEXLINK_GPU_ALLTOALL": "push", "FLEXLINK_GPU_FLAG_BYTES": "0"} {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	cfg.Devices = gpus
	drv, err := gpufake.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	job := fmt.Sprintf("gpufake%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx := testCtx(t, 30*time.Second)
	return startDevRanks(t, ctx, n, bufBytes, func(r int) (comm.Options, *gpu.Device, error) {
		mine := maps.Clone(env)
		maps.Copy(mine, each[r])
		dev, err := drv.Device(r % gpus)
		return comm.Options{Env: settings.Map(mine), Host: "fakehost", JobID: job, Secret: []byte("gpu-test")}, dev, err
	}, func(r int, c *comm.Comm, dev *gpu.Device) (*plane.DeviceComm, error) {
		return deviceComm(ctx, c, dev)
	})
}

// startDevRanks starts n ranks at once, each on an in-process store with
// the comm options and device at(r) gives, a stream, test buffers a and b
// of bufBytes and the DeviceComm open makes. The test's cleanup closes
// what was made; any rank's error fails the test.
func startDevRanks(t *testing.T, ctx context.Context, n, bufBytes int, at func(r int) (comm.Options, *gpu.Device, error),
	open func(r int, c *comm.Comm, dev *gpu.Device) (*plane.DeviceComm, error)) []*devRank {
	t.Helper()
	stores := bootstrap.NewInProc(n)
	rs := make([]*devRank, n)
	errs := eachRank(n, func(r int) error {
		opts, dev, err := at(r)
		if err != nil {
			return err
		}
		c, err := comm.New(ctx, stores[r], opts)
		if err != nil {
			return err
		}
		dr := &devRank{c: c}
		rs[r] = dr
		if dr.s, err = dev.NewStream(); err != nil {
			return err
		}
		if dr.a, err = dev.Alloc(bufBytes); err != nil {
			return err
		}
		if dr.b, err = dev.Alloc(bufBytes); err != nil {
			return err
		}
		dr.dc, err = open(r, c, dev)
		return err
	})
	t.Cleanup(func() { onRanks(rs, (*devRank).close) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return rs
}

// sweep runs every case on every rank and fails on any error or wrong
// element.
func sweep(t *testing.T, rs []*devRank, cases []devCase) {
	ctx := testCtx(t, 60*time.Second)
	for _, c := range cases {
		sweepCase(ctx, t, rs, c)
	}
}

// sweepCase runs c on every rank and checks each one's result.
func sweepCase(ctx context.Context, t *testing.T, rs []*devRank, c devCase) {
	t.Helper()
	checkRanks(t, rs, c, "", func(r *devRank) (int, error) { return runDevCase(ctx, r, c) })
}

// checkRanks runs run on every rank at once and fails on any rank's
// error or wrong elements (counted as what says) in case c.
func checkRanks(t *testing.T, rs []*devRank, c devCase, what string, run func(r *devRank) (wrong int, err error)) {
	t.Helper()
	wrong := make([]int, len(rs))
	errs := onRanks(rs, func(r *devRank) (err error) {
		wrong[r.c.Rank()], err = run(r)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%v: rank %d: %v", c, r, err)
		}
		if wrong[r] != 0 {
			t.Errorf("%v: rank %d: %d wrong elements%s", c, r, wrong[r], what)
		}
	}
}

// close frees what the rank holds (any of it may be missing) and closes
// its comm.
func (r *devRank) close() error {
	if r == nil {
		return nil
	}
	if r.dc != nil {
		r.dc.Close(context.Background())
	}
	for _, b := range []*gpu.Buffer{r.a, r.b} {
		if b != nil {
			b.Free()
		}
	}
	if r.s != nil {
		r.s.Close()
	}
	if r.c != nil {
		return r.c.Close()
	}
	return nil
}

const fakeBig = 300_000 // elements: several 64 KiB chunks and pushes over fanOutMin

func TestGPUFakeDirect(t *testing.T) {
	// flag: FLEXLINK_GPU_FLAG_BYTES ("0": the handshake allreduce only;
	// "-1": the default, flag allreduces for every size (two-shot over 2 MiB
	// beyond two ranks) and the other collectives' flag kernels up to 16 MiB
	// per peer, so the larger cases mix both; a small region and few
	// blocks make the slots wrap many times within one call; "1T": the flag
	// kernels for every size of every collective, FLEXLINK_GPU_FLAG_COLL_BYTES
	// too, and allreduces over 1 KiB two-shot beyond two ranks).
	for _, tc := range []struct {
		n                 int
		mode, lanes, flag string
		blocks, region    string
	}{{1, "auto", "1", "-1", "32", "67108864"}, {2, "read", "1", "0", "", ""}, {2, "push", "3", "0", "", ""},
		{3, "push", "1", "0", "", ""}, {3, "read", "2", "0", "", ""}, {4, "auto", "2", "0", "", ""},
		{2, "read", "1", "-1", "3", "262144"}, {3, "auto", "1", "-1", "5", "1048576"}, {4, "read", "1", "-1", "32", "67108864"},
		{4, "read", "1", "1T", "16", "4194304"}, {3, "read", "1", "1T", "", ""},
		{8, "read", "1", "1T", "", ""}} { // 8: the flag kernels' most ranks (gpu.FlagMaxRanks)
		n := tc.n
		t.Run(fmt.Sprintf("%dranks-%s-%slanes-flag%s", n, tc.mode, tc.lanes, tc.flag), func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_GPU_ALLREDUCE": tc.mode, "FLEXLINK_GPU_COPY_STREAMS": tc.lanes,
				"FLEXLINK_GPU_FLAG_BYTES": tc.flag}
			if tc.flag == "1T" {
				env["FLEXLINK_GPU_FLAG_BYTES"], env["FLEXLINK_GPU_FLAG_COLL_BYTES"] = "1099511627776", "1099511627776"
				env["FLEXLINK_GPU_FLAG_ONESHOT_BYTES"] = "1024"
			}
			if tc.blocks != "" {
				env["FLEXLINK_GPU_FLAG_BLOCKS"], env["FLEXLINK_GPU_FLAG_REGION_BYTES"] = tc.blocks, tc.region
			}
			rs := fakeRanks(t, n, gpufake.Config{}, env, n*fakeBig*8)
			for _, r := range rs {
				if r.dc.Path() != "direct" {
					t.Fatalf("rank %d path %s, want direct", r.c.Rank(), r.dc.Path())
				}
			}
			sweep(t, rs, devCases(n, fakeBig))
			for _, r := range rs {
				f := r.dc.Plane().(*directPlane).flag
				if on := n > 1 && tc.flag != "0"; on != (f != nil) || on && f.State().Calls == 0 {
					t.Errorf("rank %d: flag plane %v (calls %d), want on=%v", r.c.Rank(), f != nil, flagCalls(f), on)
				}
			}
		})
	}
}

func flagCalls(f *flagplane.Plane) uint64 {
	if f == nil {
		return 0
	}
	return f.State().Calls
}

func TestGPUFakeStaged(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gpufake.Config
		env  map[string]string
	}{
		{"forced", gpufake.Config{}, map[string]string{"FLEXLINK_GPU_PATH": "staged"}},
		{"nopeer", gpufake.Config{NoPeer: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := fakeRanks(t, 3, tc.cfg, tc.env, 3*fakeBig*8)
			for _, r := range rs {
				if r.dc.Path() != "staged" {
					t.Fatalf("rank %d path %s, want staged", r.c.Rank(), r.dc.Path())
				}
			}
			sweep(t, rs, devCases(3, 5000))
		})
	}
}

// TestGPUFakeDirectRefused: forcing the direct plane where a GPU cannot
// reach another fails on every rank with ErrNotSupported.
func TestGPUFakeDirectRefused(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{Devices: 2, NoPeer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	stores := bootstrap.NewInProc(2)
	ctx := testCtx(t, 20*time.Second)
	job := fmt.Sprintf("gpufake%d-%d", os.Getpid(), time.Now().UnixNano())
	errs2 := eachRank(2, func(r int) error {
		c, err := comm.New(ctx, stores[r], comm.Options{Env: settings.Map(map[string]string{"FLEXLINK_GPU_PATH": "direct"}), Host: "h", JobID: job, Secret: []byte("gpu-test")})
		if err != nil {
			return err
		}
		defer c.Close()
		dev, _ := drv.Device(r)
		_, err = deviceComm(ctx, c, dev)
		return err
	})
	for r, err := range errs2 {
		if !errors.Is(err, errs.ErrNotSupported) {
			t.Errorf("rank %d: %v, want ErrNotSupported", r, err)
		}
	}
}

// TestGPUFakeGroup: a ring of sends and receives, and a pair exchange among
// some ranks only, through both planes.
func TestGPUFakeGroup(t *testing.T) {
	for _, path := range []string{"direct", "staged"} {
		t.Run(path, func(t *testing.T) {
			const n, elems = 4, 5000
			rs := fakeRanks(t, n, gpufake.Config{}, map[string]string{"FLEXLINK_GPU_PATH": path}, 4*elems*4)
			ctx := testCtx(t, 30*time.Second)
			errs := onRanks(rs, func(r *devRank) error { return groupRound(ctx, r, elems) })
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// groupRound: every rank sends block 0 of a to the next rank and receives
// block 1 of b from the previous; then the first and last ranks swap (the
// others sit out) with two messages each way; then the last rank sends
// block 1 of a to the first alone (a pipeline step: on two ranks the flag
// send/recv).
func groupRound(ctx context.Context, r *devRank, elems int) error {
	n, me := r.c.Size(), r.c.Rank()
	blk := elems * 4
	vals := func(src, k int) []byte {
		b := make([]byte, blk)
		for i := 0; i < elems; i++ {
			dtype.Put(b, i, dtype.Float32, float64(src*1000+k*100+i%97))
		}
		return b
	}
	check := func(got []byte, src, k int) error {
		want := vals(src, k)
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("rank %d: message %d from rank %d differs at byte %d", me, k, src, i)
			}
		}
		return nil
	}
	a, b := r.a, r.b
	if err := r.s.CopyHtoD(a.Sub(0, blk), vals(me, 0)); err != nil {
		return err
	}
	if err := r.s.CopyHtoD(a.Sub(blk, blk), vals(me, 1)); err != nil {
		return err
	}
	next, prev := (me+1)%n, (me+n-1)%n
	if err := r.dc.Group(ctx, r.s, plane.SendTo(next, a.Sub(0, blk)), plane.RecvFrom(prev, b.Sub(blk, blk))); err != nil {
		return err
	}
	got := make([]byte, blk)
	if err := r.s.CopyDtoH(got, b.Sub(blk, blk)); err != nil {
		return err
	}
	if err := check(got, prev, 0); err != nil {
		return err
	}
	if x, y := 0, n-1; n > 1 && (me == x || me == y) {
		other := x + y - me
		if err := r.dc.Group(ctx, r.s,
			plane.RecvFrom(other, b.Sub(0, blk)), plane.SendTo(other, a.Sub(0, blk)),
			plane.SendTo(other, a.Sub(blk, blk)), plane.RecvFrom(other, b.Sub(2*blk, blk))); err != nil {
			return err
		}
		for k, off := range []int{0, 2 * blk} {
			if err := r.s.CopyDtoH(got, b.Sub(off, blk)); err != nil {
				return err
			}
			if err := check(got, other, k); err != nil {
				return err
			}
		}
		if me == y {
			if err := r.dc.Send(ctx, a.Sub(blk, blk), x, r.s); err != nil {
				return err
			}
		} else {
			if err := r.dc.Recv(ctx, b.Sub(3*blk, blk), y, r.s); err != nil {
				return err
			}
			if err := r.s.CopyDtoH(got, b.Sub(3*blk, blk)); err != nil {
				return err
			}
			if err := check(got, y, 1); err != nil {
				return err
			}
		}
	}
	return r.s.Synchronize()
}

// TestGPUFakeMismatch: ranks that call different collectives fail with
// ErrMismatch instead of mixing data or hanging.
func TestGPUFakeMismatch(t *testing.T) {
	rs := fakeRanks(t, 2, gpufake.Config{}, nil, 1<<16)
	ctx := testCtx(t, 20*time.Second)
	errs2 := onRanks(rs, func(r *devRank) error {
		count := 100 + r.c.Rank()
		return r.dc.AllReduce(ctx, r.a, r.b, count, dtype.Float32, dtype.Sum, r.s)
	})
	for r, err := range errs2 {
		if !errors.Is(err, errs.ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
}

// TestGPUEventRecordOrder checks the rule in gpu_direct.go: when a rank
// enqueues a wait on a peer's IPC event, the event's latest record is the
// one for the call the wait belongs to (never a later one). The log holds
// records before they happen and waits after, so any overlap shows. It
// runs twice: with the push allreduce (its per-chunk push events), and with
// the read allreduce and large allgathers split over PCIe (the staging
// slot events of fabric/pcieshare).
func TestGPUEventRecordOrder(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name string
		env  map[string]string
		big  int // allgather count per rank
	}{
		{"push", map[string]string{"FLEXLINK_GPU_ALLREDUCE": "push", "FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_GPU_COPY_STREAMS": "2"}, 256},
		{"pcie", map[string]string{"FLEXLINK_GPU_ALLREDUCE": "read", "FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_GPU_COPY_STREAMS": "2",
			"FLEXLINK_PCIE_SHARE": "0.3", "FLEXLINK_PCIE_STAGING_BYTES": "131072"}, 100_000},
		{"pull", map[string]string{"FLEXLINK_GPU_ALLGATHER": "pull", "FLEXLINK_GPU_ALLTOALL": "pull", "FLEXLINK_GPU_COPY_STREAMS": "2"}, 400_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := fakeRanks(t, n, gpufake.Config{}, tc.env, n*tc.big*4+(1<<20))
			var mu sync.Mutex
			var log []traceRec
			for _, r := range rs {
				pl := r.dc.Plane().(*directPlane)
				pl.px().MinSlot = 4096
				pl.trace = func(x traceRec) {
					mu.Lock()
					log = append(log, x)
					mu.Unlock()
				}
			}
			recordOrderRounds(t, rs, tc.big)
			kinds := checkRecordOrder(t, log)
			if kinds["ready/done"] == 0 || tc.name == "push" && kinds["push"] == 0 || tc.name == "pcie" && kinds["slot"] == 0 {
				t.Fatalf("waits traced by kind: %v", kinds)
			}
		})
	}
}

// recordOrderRounds runs rounds of collectives and group calls that
// involve every rank or only some.
func recordOrderRounds(t *testing.T, rs []*devRank, big int) {
	n := len(rs)
	ctx := testCtx(t, 30*time.Second)
	for round := 0; round < 20; round++ {
		errs := onRanks(rs, func(r *devRank) error {
			me := r.c.Rank()
			if err := r.dc.AllReduce(ctx, r.a, r.b, 100_000, dtype.Float32, dtype.Sum, r.s); err != nil {
				return err
			}
			// A ring (every rank), then a pair that leaves the third rank
			// out, a different pair each round.
			if err := r.dc.Group(ctx, r.s, plane.SendTo((me+1)%n, r.a.Sub(0, 256)), plane.RecvFrom((me+n-1)%n, r.b.Sub(0, 256))); err != nil {
				return err
			}
			if x, y := round%n, (round+1)%n; me == x || me == y {
				other := x + y - me
				if err := r.dc.Group(ctx, r.s, plane.SendTo(other, r.a.Sub(0, 512)), plane.RecvFrom(other, r.b.Sub(512, 512))); err != nil {
					return err
				}
			}
			return r.dc.AllGather(ctx, r.a.Sub(0, big*4), r.b.Sub(0, n*big*4), big, dtype.Float32, r.s)
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d rank %d: %v", round, r, err)
			}
		}
	}
}

// checkRecordOrder fails t at the first wait whose event was re-recorded
// since the record it belongs to, and counts the waits by event kind.
func checkRecordOrder(t *testing.T, log []traceRec) map[string]int {
	type key struct{ owner, to, chunk int }
	latest := map[key]uint64{}
	kinds := map[string]int{}
	for i, x := range log {
		k := key{x.owner, x.to, x.chunk}
		if !x.wait {
			latest[k] = x.call
			continue
		}
		switch {
		case x.chunk >= 0:
			kinds["push"]++
		case x.chunk <= -2:
			kinds["slot"]++
		default:
			kinds["ready/done"]++
		}
		if latest[k] != x.call {
			t.Fatalf("log entry %d: rank %d waits on rank %d's event (to %d, chunk %d) for call %d, but its latest record is call %d",
				i, x.actor, x.owner, x.to, x.chunk, x.call, latest[k])
		}
	}
	return kinds
}
