package collectives_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/fake"
)

var (
	collNames   = []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"}
	sweepRanks  = []int{1, 2, 3, 4, 5, 8}
	sweepCounts = []int{0, 1, 7, 1000}
)

// sweepConfig uses a tiny chunk (40 bytes: 5 to 40 elements) so that 1000
// elements already take the multi-chunk, windowed, scratch-recycling paths
// of every algorithm, and a threshold that sends counts 1 and 7 down the
// latency path under auto.
func sweepConfig(algo string) collectives.Config {
	return collectives.Config{Algo: algo, Threshold: 256, ChunkBytes: 40}
}

// fabrics are the network shapes of the sweep: ideal; copied in 16-byte
// segments (deliveries run concurrently with everything else); and timed
// with seeded jitter (messages arrive late and in varied rhythm).
var fabrics = []struct {
	name string
	opt  fake.Options
	// every limits the timed fabric to some cases: timers make it slow.
	every int
}{
	{"ideal", fake.Options{}, 1},
	{"segmented", fake.Options{MaxSegment: 16, Seed: 1}, 1},
	{"jitter", fake.Options{Jitter: 30 * time.Microsecond, Seed: 2}, 7},
}

// TestSweep checks every collective × dtype × reduction op × in/out of
// place × count {0,1,7,1000} × ranks {1,2,3,4,5,8} × algorithm {ring, rd,
// auto} × fabric against the serial reference. Reduction ops are rotated
// over the cases so every (collective, dtype, op) triple appears for every
// rank count without multiplying the sweep by five. One world (network and
// engines) serves all cases of a subtest, so the call numbers run up as in
// a real job.
func TestSweep(t *testing.T) {
	for _, coll := range collNames {
		for _, n := range sweepRanks {
			for _, algo := range []string{"ring", "rd", "auto"} {
				for fi, fab := range fabrics {
					if testing.Short() && fi > 0 && n != 3 && n != 8 {
						continue // -short trims: other fabrics only for 3 and 8 ranks
					}
					t.Run(fmt.Sprintf("%s/n=%d/%s/%s", coll, n, algo, fab.name), func(t *testing.T) {
						sweep(t, coll, n, sweepConfig(algo), fab.opt, fab.every)
					})
				}
			}
		}
	}
}

func sweep(t *testing.T, coll string, n int, cfg collectives.Config, opt fake.Options, every int) {
	w := newWorld(n, opt, cfg)
	idx := 0
	for _, dt := range dtype.All() {
		for _, inPlace := range []bool{false, true} {
			for _, count := range sweepCounts {
				idx++
				if idx%every != 0 {
					continue
				}
				c := collCase{coll: coll, dt: dt, count: count, inPlace: inPlace, seed: uint64(idx),
					op: dtype.Ops()[(idx+n)%len(dtype.Ops())], root: (idx * 7) % n}
				if !runCase(t, w, c) {
					w = newWorld(n, opt, cfg) // the failed world is aborted
				}
			}
		}
	}
}

// runCase runs c on every rank of w and checks the results; it reports
// whether the world is still usable.
func runCase(t *testing.T, w *world, c collCase) bool {
	t.Helper()
	res := make([]result, w.n)
	errs := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
		var err error
		res[r], err = c.exec(ctx, e, w.n, r)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("%v: rank %d: %v", c, r, err)
			return false
		}
	}
	if err := c.check(w.n, res); err != nil {
		t.Errorf("%v: %v", c, err)
	}
	return true
}

// TestLarge runs 2^20+3 elements (not a multiple of anything) through a
// few combinations with 4 KiB chunks: thousands of chunks per call, deep
// into the pipelines' steady state.
func TestLarge(t *testing.T) {
	const count = 1<<20 + 3
	for _, tc := range []struct {
		n    int
		algo string
		c    collCase
	}{
		{3, "ring", collCase{coll: "allreduce", dt: dtype.Float32, op: dtype.Sum}},
		{5, "ring", collCase{coll: "allreduce", dt: dtype.BFloat16, op: dtype.Avg, inPlace: true}},
		{4, "rd", collCase{coll: "allreduce", dt: dtype.Int32, op: dtype.Prod}},
		{4, "ring", collCase{coll: "reducescatter", dt: dtype.Float16, op: dtype.Max, inPlace: true}},
		{3, "ring", collCase{coll: "allgather", dt: dtype.Int8}},
		{5, "ring", collCase{coll: "broadcast", dt: dtype.Float64, root: 2}},
		{3, "ring", collCase{coll: "reduce", dt: dtype.Float32, op: dtype.Sum, root: 1}},
		{3, "ring", collCase{coll: "alltoall", dt: dtype.Uint8, inPlace: true}},
	} {
		tc.c.count, tc.c.seed = count, 77
		if testing.Short() && tc.n > 3 {
			continue // -short trims to 3 ranks
		}
		t.Run(fmt.Sprintf("n=%d/%s/%v", tc.n, tc.algo, tc.c), func(t *testing.T) {
			w := newWorld(tc.n, fake.Options{}, collectives.Config{Algo: tc.algo, ChunkBytes: 4 << 10})
			runCase(t, w, tc.c)
		})
	}
}
