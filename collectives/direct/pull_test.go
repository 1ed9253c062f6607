package direct

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestGPUFakePull runs the sweep with allgather and alltoall in pull mode
// (gpu_direct_pull.go) and in store mode (the pushes as kernel stores; with
// a forced PCIe share too), plus block sizes that leave unaligned tails
// and unaligned block offsets.
func TestGPUFakePull(t *testing.T) {
	for _, tc := range []struct {
		n           int
		lanes, mode string
		pcie        bool
	}{{2, "1", "pull", false}, {3, "2", "pull", false}, {2, "1", "store", false}, {3, "2", "store", true}} {
		t.Run(fmt.Sprintf("%dranks-%s-pcie%v", tc.n, tc.mode, tc.pcie), func(t *testing.T) {
			n := tc.n
			env := map[string]string{"FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_GPU_COPY_STREAMS": tc.lanes,
				"FLEXLINK_GPU_ALLGATHER": tc.mode, "FLEXLINK_GPU_ALLTOALL": tc.mode}
			if tc.pcie {
				env["FLEXLINK_PCIE_SHARE"], env["FLEXLINK_PCIE_STAGING_BYTES"] = "0.3", "131072"
			}
			rs := fakeRanks(t, n, gpufake.Config{}, env, n*fakeBig*8)
			for _, r := range rs {
				if r.dc.Path() != "direct" {
					t.Fatalf("rank %d path %s, want direct", r.c.Rank(), r.dc.Path())
				}
			}
			cs := devCases(n, fakeBig)
			for _, count := range []int{15, 40_000, 40_001, 3*40_000 + 5, 1<<20 + 3} {
				for _, inPlace := range []bool{false, true} {
					cs = append(cs, devCase{kind: plane.AllGather, count: count, dt: dtype.Int8, inPlace: inPlace})
				}
				cs = append(cs, devCase{kind: plane.AllToAll, count: count, dt: dtype.Int8},
					devCase{kind: plane.AllToAll, count: count/4 + 1, dt: dtype.Int32})
			}
			sweep(t, rs, cs)
			for _, r := range rs {
				if sh := r.dc.LinkShares(); (sh["pcie"] != 0) != tc.pcie {
					t.Errorf("rank %d: link shares %v in %s mode with a forced pcie share %v", r.c.Rank(), sh, tc.mode, tc.pcie)
				}
			}
		})
	}
}

// TestGPUFakePullMismatch: ranks that disagree on the allgather mode fail
// with ErrMismatch instead of leaving blocks unwritten.
func TestGPUFakePullMismatch(t *testing.T) {
	rs := fakeRanks(t, 2, gpufake.Config{}, nil, 1<<16)
	rs[1].dc.Plane().(*directPlane).modes.agPull = true // as if rank 1 had FLEXLINK_GPU_ALLGATHER=pull
	ctx := testCtx(t, 30e9)
	c := devCase{kind: plane.AllGather, count: 1000, dt: dtype.Float32}
	for r, err := range onRanks(rs, func(r *devRank) error { _, err := runDevCase(ctx, r, c); return err }) {
		if !errors.Is(err, errs.ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
}
