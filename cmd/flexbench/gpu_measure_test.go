package main

import (
	"sync/atomic"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

// The GPU path checks results in parallel parts (offset + inParallel);
// every part must see the reference of its own elements.
func TestParallelVerify(t *testing.T) {
	for _, name := range []string{"allreduce", "allgather", "reducescatter", "alltoall"} {
		spec, _ := lookupOp(name)
		cfg := config{spec: spec, dt: dtype.Float32, op: dtype.Sum}
		const n, me, elems = 3, 1, 30001
		e := spec.round(elems, n)
		sc, rc := spec.counts(e, n)
		out := make([]byte, rc*4)
		for i := 0; i < rc; i++ {
			v, _ := spec.expect(me, i, n, sc, cfg.op, 0)
			dtype.Put(out, i, cfg.dt, v)
		}
		for _, bad := range []int{0, rc / 2, rc - 1} {
			dtype.Put(out, bad, cfg.dt, 1e6)
		}
		var wrong atomic.Int64
		inParallel(rc, func(lo, hi int) {
			wrong.Add(verify(rank.Bytes(out[lo*4:hi*4], cfg.dt), cfg.offset(lo), me, n, sc))
		})
		if wrong.Load() != 3 {
			t.Errorf("%s: %d wrong, want the 3 planted", name, wrong.Load())
		}
	}
}
