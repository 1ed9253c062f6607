package rank

import (
	"errors"
	"fmt"
	"testing"

	"flexlink/dtype"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// TestGPUFakePull runs the sweep with allgather and alltoall in pull mode
// (gpu_direct_pull.go), with a zero buffer small enough that large blocks
// go in several pieces, plus block sizes that leave unaligned tails and
// unaligned block offsets.
func TestGPUFakePull(t *testing.T) {
	defer func(z int) { pullZeroBytes = z }(pullZeroBytes)
	pullZeroBytes = 40_000 // 16-byte multiple; fakeBig float32 blocks take 30 pieces
	for _, tc := range []struct {
		n     int
		lanes string
	}{{2, "1"}, {3, "2"}} {
		t.Run(fmt.Sprintf("%dranks", tc.n), func(t *testing.T) {
			n := tc.n
			env := map[string]string{"FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_GPU_COPY_STREAMS": tc.lanes,
				"FLEXLINK_GPU_ALLGATHER": "pull", "FLEXLINK_GPU_ALLTOALL": "pull"}
			rs := fakeRanks(t, n, gpu.FakeConfig{}, env, n*fakeBig*8)
			for _, r := range rs {
				if r.dc.Path() != "direct" {
					t.Fatalf("rank %d path %s, want direct", r.c.Rank(), r.dc.Path())
				}
			}
			cs := devCases(n, fakeBig)
			for _, count := range []int{15, 40_000, 40_001, 3*40_000 + 5, 1<<20 + 3} {
				for _, inPlace := range []bool{false, true} {
					cs = append(cs, devCase{kind: devAllGather, count: count, dt: dtype.Int8, inPlace: inPlace})
				}
				cs = append(cs, devCase{kind: devAllToAll, count: count, dt: dtype.Int8},
					devCase{kind: devAllToAll, count: count/4 + 1, dt: dtype.Int32})
			}
			sweep(t, rs, cs)
			for _, r := range rs {
				if sh := r.dc.LinkShares(); sh["pcie"] != 0 {
					t.Errorf("rank %d: pcie share %v in pull mode", r.c.Rank(), sh)
				}
			}
		})
	}
}

// TestGPUFakePullMismatch: ranks that disagree on the allgather mode fail
// with ErrMismatch instead of leaving blocks unwritten.
func TestGPUFakePullMismatch(t *testing.T) {
	rs := fakeRanks(t, 2, gpu.FakeConfig{}, nil, 1<<16)
	rs[1].dc.plane.(*directPlane).agPull = true // as if rank 1 had FLEXLINK_GPU_ALLGATHER=pull
	ctx := testCtx(t, 30e9)
	c := devCase{kind: devAllGather, count: 1000, dt: dtype.Float32}
	for r, err := range onRanks(rs, func(r *devRank) error { _, err := runDevCase(ctx, r, c); return err }) {
		if !errors.Is(err, errs.ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
}
