package direct

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
)

// The flag allreduce's PCIe part on the fake driver: calls on the large
// region (32 MiB and more) split between NVLink blocks and blocks that go
// through the pinned inboxes, rank 1 taking rank 0's split from its
// kernel; every element checked against the float64 reference.

func flagPCIeRanks(t *testing.T, extra map[string]string) []*devRank {
	return flagPCIeRanksBuf(t, extra, 40<<20)
}

func flagPCIeRanksBuf(t *testing.T, extra map[string]string, bufBytes int) []*devRank {
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_BLOCKS": "4",
		"FLEXLINK_GPU_FLAG_REGION_BYTES": "4194304", "FLEXLINK_GPU_FLAG_PCIE_BLOCKS": "3"}
	for k, v := range extra {
		env[k] = v
	}
	return fakeRanks(t, 2, gpufake.Config{SMs: 8}, env, bufBytes)
}

func TestGPUFakeFlagPCIe(t *testing.T) {
	const f32 = 8<<20 + 37 // 32 MiB and a bit: the large region; a head that needs rounding
	cases := []devCase{
		{kind: plane.AllReduce, count: f32, dt: dtype.Float32, op: dtype.Sum},
		{kind: plane.AllReduce, count: 32<<20 + 5, dt: dtype.Int8, op: dtype.Max},
		{kind: plane.AllReduce, count: 4<<20 + 1, dt: dtype.Float64, op: dtype.Avg, inPlace: true},
		{kind: plane.AllReduce, count: 1000, dt: dtype.Float32, op: dtype.Sum}, // small region: NVLink only
		{kind: plane.AllReduce, count: f32, dt: dtype.Float32, op: dtype.Prod},
	}
	for _, tc := range []struct {
		name  string
		share string // FLEXLINK_PCIE_SHARE; "": the balancer
	}{{"fixed-0.3", "0.3"}, {"fixed-0.5", "0.5"}, {"balancer", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			rs := flagPCIeRanks(t, map[string]string{"FLEXLINK_PCIE_SHARE": tc.share})
			for _, r := range rs {
				if !r.dc.Plane().(*directPlane).flag.HasPCIe() {
					t.Fatalf("rank %d: no pcie part", r.c.Rank())
				}
			}
			sweep(t, rs, cases[:1])
			for _, r := range rs {
				p := r.dc.Plane().(*directPlane)
				if tc.share != "" && p.stats.last[1] == 0 && r.c.Rank() == 0 {
					t.Errorf("rank 0: the first large call moved nothing over pcie (last %v)", p.stats.last)
				}
			}
			sweep(t, rs, cases)
			if tc.share == "" {
				// The balancer has had the times of some of those calls.
				if st := rs[0].dc.Plane().(*directPlane).flag.State(); st.PCIeObserved == 0 {
					t.Errorf("rank 0: the balancer observed no call (pending %d)", st.PCIePending)
				}
				return
			}
			// Rank 1 reports the split its kernel took from rank 0's.
			p0, p1 := rs[0].dc.Plane().(*directPlane), rs[1].dc.Plane().(*directPlane)
			if p1.flag.State().LastPCIe == 0 {
				t.Errorf("rank 1: its kernels saw no pcie part")
			}
			if p0.stats.last[1] == 0 {
				t.Errorf("rank 0: the last call moved nothing over pcie")
			}
		})
	}
}

// TestGPUFakeFlagPCIeOff: FLEXLINK_LINKS without pcie, or no PCIe blocks,
// keep the flag allreduce on NVLink only.
func TestGPUFakeFlagPCIeOff(t *testing.T) {
	for _, env := range []map[string]string{
		{"FLEXLINK_LINKS": "nvlink"},
		{"FLEXLINK_GPU_FLAG_PCIE_BLOCKS": "0"},
		{"FLEXLINK_GPU_FLAG_PCIE_BLOCKS": "8"}, // no SM left for NVLink blocks beside them (8 SMs)
	} {
		rs := flagPCIeRanks(t, env)
		for _, r := range rs {
			if f := r.dc.Plane().(*directPlane).flag; f == nil || f.HasPCIe() {
				t.Errorf("%v: rank %d: flag plane %v, pcie part %v", env, r.c.Rank(), f != nil, f.HasPCIe())
			}
		}
		sweep(t, rs, []devCase{{kind: plane.AllReduce, count: 8<<20 + 1, dt: dtype.Float32, op: dtype.Sum}})
		for _, r := range rs {
			if p := r.dc.Plane().(*directPlane); p.stats.last[1] != 0 {
				t.Errorf("%v: rank %d: %d bytes over pcie", env, r.c.Rank(), p.stats.last[1])
			}
		}
	}
}

// TestGPUFakeFlagMismatchKinds: ranks that call different collectives on
// the flag plane end with ErrMismatch soon, not after the kernel timeout,
// with the PCIe part too, where rank 1 first waits for rank 0's plan.
func TestGPUFakeFlagMismatchKinds(t *testing.T) {
	big := 8<<20 + 37 // the large region: allreduces there have a pcie part
	type call func(r *devRank, ctx context.Context) error
	allreduce := func(n int) call {
		return func(r *devRank, ctx context.Context) error {
			return r.dc.AllReduce(ctx, r.a, r.b, n, dtype.Float32, dtype.Sum, r.s)
		}
	}
	allgather := func(n int) call {
		return func(r *devRank, ctx context.Context) error {
			return r.dc.AllGather(ctx, r.a.Sub(0, n*4), r.b.Sub(0, 2*n*4), n, dtype.Float32, r.s)
		}
	}
	reducescatter := func(n int) call {
		return func(r *devRank, ctx context.Context) error {
			return r.dc.ReduceScatter(ctx, r.a.Sub(0, 2*n*4), r.b.Sub(0, n*4), n, dtype.Float32, dtype.Sum, r.s)
		}
	}
	for _, tc := range []struct {
		name  string
		pcie  bool
		calls [2]call
	}{
		{"allgather-allreduce", false, [2]call{allgather(4096), allreduce(4096)}},
		{"reducescatter-allgather", false, [2]call{reducescatter(5000), allgather(5000)}},
		{"pcie-allgather-allreduce", true, [2]call{allgather(big), allreduce(big)}}, // both on the large region
		{"pcie-allreduce-counts", true, [2]call{allreduce(big), allreduce(big + 64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_COLL_BYTES": "1099511627776", "FLEXLINK_GPU_KERNEL_TIMEOUT": "20s"}
			if tc.pcie {
				env["FLEXLINK_PCIE_SHARE"] = "0.3"
			} else {
				env["FLEXLINK_GPU_FLAG_PCIE_BLOCKS"] = "0"
			}
			rs := flagPCIeRanksBuf(t, env, 2*big*4)
			ctx := testCtx(t, 30*time.Second)
			start := time.Now()
			errs2 := settleOn(rs, func(r *devRank) error { return tc.calls[r.c.Rank()](r, ctx) })
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the mismatch took %v to show (a timeout, not a check)", d)
			}
			for r, err := range errs2 {
				if err == nil || !strings.Contains(err.Error(), "rank "+string(rune('0'+1-r))) && !errors.Is(err, errs.ErrMismatch) {
					t.Errorf("rank %d: %v, want an error naming rank %d or ErrMismatch", r, err, 1-r)
				}
			}
			if !errors.Is(errs2[0], errs.ErrMismatch) && !errors.Is(errs2[1], errs.ErrMismatch) {
				t.Errorf("no rank reports ErrMismatch: %v / %v", errs2[0], errs2[1])
			}
		})
	}
}
