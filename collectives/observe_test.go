package collectives_test

import (
	"context"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/fake"
)

// TestObserver: every call is seen at its start and at its end, with the
// arguments given and the algorithm the size implies, on every rank; a
// call rejected for its arguments is not seen.
func TestObserver(t *testing.T) {
	const n = 4
	w := newWorld(n, fake.Options{}, collectives.Config{Threshold: 1024})
	seen := make([][]collectives.Call, n)
	for r, e := range w.engines {
		e.SetObserver(func(c collectives.Call) { seen[r] = append(seen[r], c) })
	}
	errs := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
		small := make(collectives.HostBuffer, 64*4)
		big := make(collectives.HostBuffer, 1024*4)
		if err := e.AllReduce(ctx, small, small, 64, dtype.Float32, dtype.Sum); err != nil {
			return err
		}
		if err := e.AllReduce(ctx, big, big, 1024, dtype.Float32, dtype.Max); err != nil {
			return err
		}
		if e.AllReduce(ctx, small, small, 1024, dtype.Float32, dtype.Sum) == nil { // buffer too short
			t.Errorf("rank %d: a short buffer was accepted", r)
		}
		return e.Broadcast(ctx, small, small, 64, dtype.Int32, 2)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	type want struct {
		op, algo string
		count    int64
		redOp    dtype.Op
		root     int
	}
	wants := []want{
		{"allreduce", collectives.AlgoRD, 64, dtype.Sum, -1},
		{"allreduce", collectives.AlgoRing, 1024, dtype.Max, -1},
		{"broadcast", "", 64, 0, 2},
	}
	for r := range n {
		if len(seen[r]) != 2*len(wants) {
			t.Fatalf("rank %d: %d events, want %d: %+v", r, len(seen[r]), 2*len(wants), seen[r])
		}
		for i, w := range wants {
			start, end := seen[r][2*i], seen[r][2*i+1]
			if start.End || !end.End || end.Err != nil || start.Seq != uint64(i+1) || end.Seq != start.Seq {
				t.Errorf("rank %d call %d: start %+v end %+v", r, i, start, end)
			}
			if start.Op != w.op || start.Count != w.count || start.Root != w.root || start.Ranks != n || start.Rank != r {
				t.Errorf("rank %d call %d: %+v, want %+v", r, i, start, w)
			}
			if w.algo != "" && start.Algo != w.algo {
				t.Errorf("rank %d call %d: algo %s, want %s", r, i, start.Algo, w.algo)
			}
			if start.HasRedOp != (w.op == "allreduce") || (start.HasRedOp && start.RedOp != w.redOp) || !start.HasDType {
				t.Errorf("rank %d call %d: op fields %+v", r, i, start)
			}
		}
	}
}

// TestObserverCostsNoAllocation: a call on one rank allocates as much
// with an observer that does nothing as with none, so describing a call
// costs nothing, and with none the engine does no work for it.
func TestObserverCostsNoAllocation(t *testing.T) {
	w := newWorld(1, fake.Options{}, collectives.Config{})
	e := w.engines[0]
	buf := make(collectives.HostBuffer, 256)
	ctx := context.Background()
	call := func() {
		if err := e.AllReduce(ctx, buf, buf, 64, dtype.Float32, dtype.Sum); err != nil {
			t.Fatal(err)
		}
	}
	without := testing.AllocsPerRun(50, call)
	e.SetObserver(func(collectives.Call) {})
	with := testing.AllocsPerRun(50, call)
	if with != without {
		t.Errorf("an allreduce allocates %v times with an observer, %v without", with, without)
	}
}
