package direct

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/settings"
)

// The PCIe share on the fake driver (gpu_pcie*.go). Fake streams run each
// copy when it is enqueued, so these tests check what the protocol
// decides and moves: that the sender's and the receiver's staging tables
// agree, that results equal the host reference for every share (staging
// smaller than the PCIe part included), that the split is off exactly when
// it must be, that timings flow back to the planner and its profile is
// cached, and that a failing PCIe copy fails the call on every rank.

// splitLog collects every rank's view of every staging table.
type splitLog struct {
	mu   sync.Mutex
	recs []pcieshare.SplitRec
}

// attach logs the PCIe part's tables of every rank and sets its smallest
// slot.
func (l *splitLog) attach(rs []*devRank, minSlot int) {
	for _, r := range rs {
		pl := r.dc.Plane().(*directPlane)
		pl.px().MinSlot = minSlot
		pl.px().OnSplit = l.record
	}
}

// record is an OnSplit hook: it logs x.
func (l *splitLog) record(x pcieshare.SplitRec) {
	l.mu.Lock()
	l.recs = append(l.recs, x)
	l.mu.Unlock()
}

// check compares sender and receiver tables pair by pair and call by call,
// and checks each against the plan: the pushes carried the bytes planned,
// the PCIe part is share·B (to a page) or the staging size when that is
// smaller. It returns the PCIe bytes staged in all.
func (l *splitLog) check(t *testing.T, share float64, staging int) int {
	t.Helper()
	type key struct {
		from, to int
		call     uint64
	}
	send, recv := map[key]pcieshare.SplitRec{}, map[key]pcieshare.SplitRec{}
	for _, x := range l.recs {
		k := key{x.From, x.To, x.Call}
		m := send
		if x.Receiver {
			m = recv
		}
		if _, dup := m[k]; dup {
			t.Fatalf("two tables for %+v", k)
		}
		m[k] = x
	}
	total := 0
	for k, s := range send {
		r, ok := recv[k]
		if !ok {
			t.Fatalf("%+v: the receiver saw no table", k)
		}
		if r.SlotBytes != s.SlotBytes || fmt.Sprint(r.Segs) != fmt.Sprint(s.Segs) {
			t.Fatalf("%+v: sender's table (%d, %v) != receiver's (%d, %v)", k, s.SlotBytes, s.Segs, r.SlotBytes, r.Segs)
		}
		if s.Pushed != s.Bytes {
			t.Errorf("%+v: pushes carried %d bytes, the plan was made for %d", k, s.Pushed, s.Bytes)
		}
		staged := 0
		for _, sg := range s.Segs {
			staged += sg.N
		}
		want := min(int(share*float64(s.Bytes))/pcieAlign*pcieAlign, staging)
		if staged != want {
			t.Errorf("%+v: %d bytes staged of %d, want %d (share %g, staging %d)", k, staged, s.Bytes, want, share, staging)
		}
		total += staged
	}
	if len(recv) != len(send) {
		t.Fatalf("%d receiver tables, %d sender tables", len(recv), len(send))
	}
	return total
}

// TestGPUFakePCIeSplit: every case of the sweep is exact with PCIe shares
// 0, 0.08 and 0.5, with the default staging buffer and with one smaller
// than the PCIe part (which then carries only what fits), on 2 and 3 ranks
// and several copy lanes; both sides of every pair agree on every table.
func TestGPUFakePCIeSplit(t *testing.T) {
	for _, tc := range []struct {
		n       int
		share   string
		staging int
		lanes   string
	}{
		{2, "0", 64 << 20, "1"}, {2, "0.08", 64 << 20, "2"}, {3, "0.08", 64 << 20, "1"},
		{2, "0.5", 64 << 20, "1"}, {3, "0.5", 64 << 10, "2"}, {2, "0.08", 32 << 10, "1"},
	} {
		t.Run(fmt.Sprintf("%dranks-share%s-staging%d-%slanes", tc.n, tc.share, tc.staging, tc.lanes), func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_GPU_COPY_STREAMS": tc.lanes,
				"FLEXLINK_PCIE_SHARE": tc.share, "FLEXLINK_PCIE_STAGING_BYTES": fmt.Sprint(tc.staging)}
			rs := fakeRanks(t, tc.n, gpufake.Config{}, env, tc.n*fakeBig*8)
			var log splitLog
			log.attach(rs, 4096)
			sweep(t, rs, devCases(tc.n, fakeBig))
			var share float64
			fmt.Sscan(tc.share, &share)
			staged := log.check(t, share, tc.staging)
			if (share > 0) != (staged > 0) {
				t.Fatalf("share %g staged %d bytes", share, staged)
			}
			// The last call's shares as the API reports them.
			ctx := testCtx(t, 20*time.Second)
			onRanks(rs, func(r *devRank) error {
				return r.dc.AllGather(ctx, r.a.Sub(0, fakeBig*4), r.b.Sub(0, tc.n*fakeBig*4), fakeBig, dtype.Float32, r.s)
			})
			ls := rs[0].dc.LinkShares()
			if ls["nvlink"]+ls["pcie"] < 0.999 || (share > 0) != (ls["pcie"] > 0) || ls["pcie"] > share+0.01 {
				t.Errorf("LinkShares after an allgather with share %g: %v", share, ls)
			}
		})
	}
}

// TestGPUFakePCIeOff: FLEXLINK_LINKS without pcie, or no staging, leaves
// the direct plane as it was (no staging, no PCIe bytes), and
// FLEXLINK_LINKS=pcie alone is refused on every rank (nvlink,net too:
// netpart_test.go).
func TestGPUFakePCIeOff(t *testing.T) {
	for _, env := range []map[string]string{
		{"FLEXLINK_LINKS": "nvlink"},
		{"FLEXLINK_LINKS": "nvlink,shm"},
		{"FLEXLINK_PCIE_STAGING_BYTES": "0"},
	} {
		t.Run(fmt.Sprint(env), func(t *testing.T) {
			env["FLEXLINK_PCIE_SHARE"] = "0.5" // even a forced share changes nothing
			rs := fakeRanks(t, 2, gpufake.Config{}, env, 2*fakeBig*8)
			for _, r := range rs {
				if pl := r.dc.Plane().(*directPlane); pl.px().On() {
					t.Fatalf("rank %d has pcie staging", r.c.Rank())
				}
			}
			sweep(t, rs, devCases(2, fakeBig))
			ctx := testCtx(t, 20*time.Second)
			onRanks(rs, func(r *devRank) error {
				return r.dc.AllGather(ctx, r.a.Sub(0, fakeBig*4), r.b.Sub(0, 2*fakeBig*4), fakeBig, dtype.Float32, r.s)
			})
			if ls := rs[1].dc.LinkShares(); ls["nvlink"] != 1 || ls["pcie"] != 0 {
				t.Fatalf("LinkShares %v, want nvlink only", ls)
			}
		})
	}
	t.Run("pcie-alone", func(t *testing.T) {
		errs := fakeSetupErrors(t, map[string]string{"FLEXLINK_LINKS": "pcie"})
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "without nvlink") {
				t.Errorf("rank %d: %v, want the pcie-without-nvlink error", r, err)
			}
		}
	})
}

// TestGPUFakePCIeThreshold: with the balancer deciding, pushes below its
// threshold stay on NVLink (no table, share exactly 0), and one above it
// is split near the priors' ~11% and still exact.
func TestGPUFakePCIeThreshold(t *testing.T) {
	t.Run("below", func(t *testing.T) {
		rs := fakeRanks(t, 2, gpufake.Config{}, nil, 2*fakeBig*8)
		thr := rs[0].dc.Plane().(*directPlane).px().Tx(1).Planner.Threshold()
		if thr <= 4*fakeBig*2 {
			t.Fatalf("threshold %d bytes: the sweep's pushes reach %d", thr, 4*fakeBig*2)
		}
		var log splitLog
		log.attach(rs, pcieMinSlot)
		sweep(t, rs, devCases(2, fakeBig))
		if len(log.recs) != 0 {
			t.Fatalf("below the threshold: %d staging tables, want none", len(log.recs))
		}
		if ls := rs[0].dc.LinkShares(); ls["pcie"] != 0 || ls["nvlink"] != 1 {
			t.Fatalf("below the threshold: LinkShares %v", ls)
		}
	})
	t.Run("above", func(t *testing.T) {
		const big = 10 << 20 // float32 per rank: a 40 MiB push
		rs := fakeRanks(t, 2, gpufake.Config{}, nil, 2*big*4)
		if thr := rs[0].dc.Plane().(*directPlane).px().Tx(1).Planner.Threshold(); thr >= big*4 {
			t.Fatalf("threshold %d bytes: the test assumes it below %d", thr, big*4)
		}
		var log splitLog
		log.attach(rs, pcieMinSlot)
		sweep(t, rs, []devCase{{kind: plane.AllGather, count: big, dt: dtype.Float32}})
		ls := rs[0].dc.LinkShares()
		if ls["pcie"] < 0.05 || ls["pcie"] > 0.15 {
			t.Fatalf("above the threshold: LinkShares %v, want pcie near the priors' 0.1", ls)
		}
		if n := len(slicesFilterSender(log.recs)); n != 2 {
			t.Fatalf("%d sender tables for one allgather on 2 ranks", n)
		}
	})
}

func slicesFilterSender(recs []pcieshare.SplitRec) []pcieshare.SplitRec {
	var out []pcieshare.SplitRec
	for _, x := range recs {
		if !x.Receiver {
			out = append(out, x)
		}
	}
	return out
}

// TestGPUFakePCIeFeedback: timed pushes reach the planner on every rank
// (the receiver's report comes back in a later ready message), the
// profile is saved at Close under FLEXLINK_CACHE_DIR and the next
// DeviceComm between the same GPUs starts from it.
func TestGPUFakePCIeFeedback(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"FLEXLINK_PCIE_SHARE": "0.2", "FLEXLINK_CACHE_DIR": dir}
	rs := fakeRanks(t, 2, gpufake.Config{}, env, 2*fakeBig*8)
	ctx := testCtx(t, 30*time.Second)
	for range 8 {
		errs := onRanks(rs, func(r *devRank) error {
			return r.dc.AllGather(ctx, r.a.Sub(0, fakeBig*4), r.b.Sub(0, 2*fakeBig*4), fakeBig, dtype.Float32, r.s)
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	keys := make([]string, 2)
	for _, r := range rs {
		tx := r.dc.Plane().(*directPlane).px().Tx(1 - r.c.Rank())
		if tx.Observed < 2 {
			t.Errorf("rank %d: %d observations fed back in 8 calls", r.c.Rank(), tx.Observed)
		}
		keys[r.c.Rank()] = tx.Key
	}
	closeRanks(t, ctx, rs)
	for r, key := range keys {
		st, err := balance.LoadProfile(dir, key)
		if err != nil {
			t.Fatalf("rank %d's profile: %v", r, err)
		}
		if len(st.Links) != 2 || st.Links[1].Spec.Kind != "pcie" {
			t.Fatalf("rank %d's profile has links %+v", r, st.Links)
		}
	}
	// The next communicator over the same GPUs restores the profile.
	rs2 := fakeRanks(t, 2, gpufake.Config{}, env, 1<<16)
	for _, r := range rs2 {
		tx := r.dc.Plane().(*directPlane).px().Tx(1 - r.c.Rank())
		st, _ := balance.LoadProfile(dir, tx.Key)
		if fmt.Sprint(tx.Planner.State()) != fmt.Sprint(st) {
			t.Errorf("rank %d did not start from its cached profile", r.c.Rank())
		}
	}
}

// newFakeComms makes n host communicators of one in-process job.
func newFakeComms(t *testing.T, ctx context.Context, n int, env map[string]string) []*comm.Comm {
	t.Helper()
	cs, errs := newFakeCommsErrs(t, ctx, n, env)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return cs
}

// newFakeCommsErrs is newFakeComms returning each rank's error of
// comm.New (which checks every setting) instead of failing the test.
func newFakeCommsErrs(t *testing.T, ctx context.Context, n int, env map[string]string) ([]*comm.Comm, []error) {
	stores := bootstrap.NewInProc(n)
	job := fmt.Sprintf("gpupcie%d-%d", os.Getpid(), time.Now().UnixNano())
	cs := make([]*comm.Comm, n)
	errs := eachRank(n, func(r int) (err error) {
		cs[r], err = comm.New(ctx, stores[r], comm.Options{Env: settings.Map(env), Host: "fakehost", JobID: job, Secret: []byte("gpu-test")})
		return err
	})
	t.Cleanup(func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	})
	return cs, errs
}

// fakeSetupErrors runs Comm.Device on two fake ranks with env and returns
// each rank's error.
func fakeSetupErrors(t *testing.T, env map[string]string) []error {
	drv, err := gpufake.Open(gpufake.Config{Devices: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	rs := []*devRank{{}, {}}
	ctx := testCtx(t, 20*time.Second)
	comms, errs := newFakeCommsErrs(t, ctx, 2, env)
	if errs[0] != nil || errs[1] != nil {
		return errs // a bad setting fails at communicator creation, where every setting is checked
	}
	return onRanks(rs, func(dr *devRank) error {
		r := 0
		if dr == rs[1] {
			r = 1
		}
		dev, _ := drv.Device(r)
		dc, err := deviceComm(ctx, comms[r], dev)
		if err == nil {
			dc.Close(ctx)
		}
		return err
	})
}

// closeRanks closes every rank's DeviceComm at once (a clean close, which
// saves the PCIe planners' profiles) and fails the test on any error.
func closeRanks(t *testing.T, ctx context.Context, rs []*devRank) {
	t.Helper()
	errs := onRanks(rs, func(r *devRank) error {
		err := r.dc.Close(ctx)
		r.dc = nil
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("close rank %d: %v", r, err)
		}
	}
}
