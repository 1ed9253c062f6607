package collectives_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// transportChunk (128 bytes: 16 to 128 elements) sends 1000 elements of
// any dtype through the multi-chunk paths; TestSweep's 40 bytes would
// double the time over real links, where every chunk is a message with its
// own wake-up.
const transportChunk = 128

// TestTransportSweep checks every collective × dtype × in/out of place ×
// count {0,1,7,1000} × ranks {1,2,3,4,5,8} × algorithm {ring, rd, auto}
// over real shm and tcp links against the serial reference (tolerances:
// checkReduced). Reduction ops rotate over the cases as in TestSweep, so
// every (collective, dtype, op) triple appears for every rank count. The
// links of a (transport, ranks) pair are made once; every case gets fresh
// engines with a fresh communicator id over them, so a message left over
// from an earlier case would fail the next one's tag check.
func TestTransportSweep(t *testing.T) {
	algos := []string{collectives.AlgoRing, collectives.AlgoRD, collectives.AlgoAuto}
	for _, tr := range transports {
		for _, n := range sweepRanks {
			if testing.Short() && n != 3 && n != 8 {
				continue // -short trims to 3 and 8 ranks
			}
			t.Run(fmt.Sprintf("%s/n=%d", tr.name, n), func(t *testing.T) {
				m := worldtest.Connect(t, tr.name, n, tr.opt)
				idx := 0
				for _, coll := range collNames {
					for _, dt := range dtype.All() {
						for _, inPlace := range []bool{false, true} {
							for _, count := range sweepCounts {
								idx++
								c := collCase{coll: coll, dt: dt, count: count, inPlace: inPlace, seed: uint64(idx),
									op: dtype.Ops()[(idx+n)%len(dtype.Ops())], root: (idx * 7) % n}
								for ai, algo := range algos {
									cfg := collectives.Config{Algo: algo, Threshold: 256, ChunkBytes: transportChunk}
									if !runCase(t, meshWorld(m, uint64(idx*len(algos)+ai), cfg), c) {
										m.Close() // aborted: start again on new links
										m = worldtest.Connect(t, tr.name, n, tr.opt)
									}
								}
							}
						}
					}
				}
			})
		}
	}
}

// TestTransportLarge runs 2^20+3 elements through a few combinations per
// transport with 4 KiB chunks: thousands of chunk messages per call, deep
// in the pipelines' steady state, the 64 KiB shm rings wrapping around
// again and again.
func TestTransportLarge(t *testing.T) {
	const count = 1<<20 + 3
	for _, tc := range []struct {
		n    int
		algo string
		c    collCase
	}{
		{3, "ring", collCase{coll: "allreduce", dt: dtype.Float32, op: dtype.Sum}},
		{4, "rd", collCase{coll: "allreduce", dt: dtype.BFloat16, op: dtype.Avg, inPlace: true}},
		{2, "ring", collCase{coll: "reducescatter", dt: dtype.Int32, op: dtype.Prod}},
		{3, "ring", collCase{coll: "alltoall", dt: dtype.Int8, inPlace: true}},
		{5, "auto", collCase{coll: "broadcast", dt: dtype.Float16, root: 3}},
	} {
		tc.c.count, tc.c.seed = count, 99
		for _, tr := range transports {
			if testing.Short() && tc.n > 3 {
				continue // -short trims to 3 ranks
			}
			t.Run(fmt.Sprintf("%s/n=%d/%s/%v", tr.name, tc.n, tc.algo, tc.c), func(t *testing.T) {
				m := worldtest.Connect(t, tr.name, tc.n, tr.opt)
				runCase(t, meshWorld(m, 1, collectives.Config{Algo: tc.algo, ChunkBytes: 4 << 10}), tc.c)
			})
		}
	}
}

// flipLink corrupts one byte of every message it receives: what a link
// that loses data integrity would do.
type flipLink struct{ fabric.Link }

func (l flipLink) Recv(tag fabric.Tag, buf []byte) fabric.Request {
	inner, r := l.Link.Recv(tag, buf), fabric.NewReq()
	go func() {
		<-inner.Done()
		if inner.Err() == nil && len(buf) > 0 {
			buf[len(buf)/2] ^= 0x40
		}
		r.Complete(inner.Err())
	}()
	return r
}

// TestTransportSweepDetectsCorruption shows that the sweep's check sees
// data damaged on a real link: with rank 0's incoming links corrupting
// every message, the calls succeed but the results must be rejected.
func TestTransportSweepDetectsCorruption(t *testing.T) {
	for _, tr := range transports {
		for _, c := range []collCase{
			{coll: "allreduce", dt: dtype.Int32, op: dtype.Sum, count: 1000, seed: 1},
			{coll: "allgather", dt: dtype.Float32, count: 1000, seed: 2},
			{coll: "broadcast", dt: dtype.Float64, count: 1000, root: 1, seed: 3},
			{coll: "alltoall", dt: dtype.Uint8, count: 1000, seed: 4},
		} {
			t.Run(fmt.Sprintf("%s/%v", tr.name, c), func(t *testing.T) {
				const n = 3
				m := worldtest.Connect(t, tr.name, n, tr.opt)
				for p, l := range m.Links[0] {
					if l != nil {
						m.Links[0][p] = flipLink{l}
					}
				}
				w := meshWorld(m, 1, collectives.Config{Algo: collectives.AlgoRing, ChunkBytes: transportChunk})
				res := make([]result, n)
				errs := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
					var err error
					res[r], err = c.exec(ctx, e, n, r)
					return err
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				if err := c.check(n, res); err == nil {
					t.Errorf("corrupted results passed the check")
				}
			})
		}
	}
}
