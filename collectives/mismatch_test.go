package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/internal/errs"
)

type opFn func(ctx context.Context, e *collectives.Engine) error

func allReduceOp(count int, dt dtype.DType, op dtype.Op) opFn {
	return func(ctx context.Context, e *collectives.Engine) error {
		b := collectives.HostBuffer(make([]byte, count*dt.Size()))
		return e.AllReduce(ctx, b, b, count, dt, op)
	}
}

func broadcastOp(count int, root int) opFn {
	return func(ctx context.Context, e *collectives.Engine) error {
		b := collectives.HostBuffer(make([]byte, count*4))
		return e.Broadcast(ctx, b, b, count, dtype.Float32, root)
	}
}

func reduceOp(count int, op dtype.Op, root int) opFn {
	return func(ctx context.Context, e *collectives.Engine) error {
		b := collectives.HostBuffer(make([]byte, count*4))
		return e.Reduce(ctx, b, b, count, dtype.Float32, op, root)
	}
}

func allGatherOp(count int) opFn {
	return func(ctx context.Context, e *collectives.Engine) error {
		b := collectives.HostBuffer(make([]byte, e.Size()*count*4))
		return e.AllGather(ctx, b.Slice(e.Rank()*count*4, count*4), b, count, dtype.Float32)
	}
}

func seqOps(ops ...opFn) opFn {
	return func(ctx context.Context, e *collectives.Engine) error {
		for _, op := range ops {
			if err := op(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
}

func barrierOp(ctx context.Context, e *collectives.Engine) error { return e.Barrier(ctx) }

// TestMismatch makes one rank call something else than the others and
// checks that every rank fails with errs.ErrMismatch, never hangs, and that
// the error names the odd rank and what differs. As in the runtime, the
// first rank to fail aborts the job (harness); a rank whose own call
// completed before the abort reached it (one far from the odd rank) fails
// in its next call, here a barrier.
func TestMismatch(t *testing.T) {
	ring := collectives.Config{Algo: "ring", ChunkBytes: 64}
	rd := collectives.Config{Algo: "rd", ChunkBytes: 64}
	for _, tc := range []struct {
		name        string
		normal, odd opFn
		cfg, oddCfg collectives.Config
		differs     string
	}{
		{"count", allReduceOp(1000, dtype.Float32, dtype.Sum), allReduceOp(999, dtype.Float32, dtype.Sum), ring, ring, "count"},
		{"count/rd", allReduceOp(10, dtype.Float32, dtype.Sum), allReduceOp(9, dtype.Float32, dtype.Sum), rd, rd, "count"},
		{"count/zero", allReduceOp(7, dtype.Float32, dtype.Sum), allReduceOp(0, dtype.Float32, dtype.Sum), rd, rd, "count"},
		{"dtype", allReduceOp(100, dtype.Float32, dtype.Sum), allReduceOp(100, dtype.Int32, dtype.Sum), ring, ring, "dtype"},
		{"op", allReduceOp(100, dtype.Float32, dtype.Sum), allReduceOp(100, dtype.Float32, dtype.Max), rd, rd, "op"},
		{"root/broadcast", broadcastOp(500, 0), broadcastOp(500, 1), ring, ring, "root"},
		{"root/broadcast/tree", broadcastOp(5, 0), broadcastOp(5, 1), rd, rd, "root"},
		{"root/reduce", reduceOp(500, dtype.Sum, 1), reduceOp(500, dtype.Sum, 0), ring, ring, "root"},
		{"op/reduce/tree", reduceOp(5, dtype.Sum, 0), reduceOp(5, dtype.Min, 0), rd, rd, "op"},
		{"collective", allReduceOp(100, dtype.Float32, dtype.Sum), allGatherOp(100), ring, ring, "collective"},
		{"skipped call", seqOps(barrierOp, allReduceOp(8, dtype.Float32, dtype.Sum)), allReduceOp(8, dtype.Float32, dtype.Sum), rd, rd, "collective"},
		{"algorithm", allReduceOp(16, dtype.Float64, dtype.Sum), allReduceOp(16, dtype.Float64, dtype.Sum), rd, ring, "algorithm"},
		{"chunk size", allReduceOp(1000, dtype.Float32, dtype.Sum), allReduceOp(1000, dtype.Float32, dtype.Sum), ring, collectives.Config{Algo: "ring", ChunkBytes: 128}, "bytes"},
	} {
		for _, n := range []int{2, 3, 5, 8} {
			odd := n / 2
			t.Run(fmt.Sprintf("%s/n=%d", tc.name, n), func(t *testing.T) {
				w := newWorldCfg(n, fake.Options{}, func(r int) collectives.Config {
					if r == odd {
						return tc.oddCfg
					}
					return tc.cfg
				})
				errs := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
					op := tc.normal
					if r == odd {
						op = tc.odd
					}
					if err := op(ctx, e); err != nil {
						return err
					}
					return e.Barrier(ctx)
				})
				for r, err := range errs {
					if !isMismatch(err) {
						t.Errorf("rank %d: error %v, want one wrapping ErrMismatch", r, err)
						continue
					}
					msg := err.Error()
					if !strings.Contains(msg, tc.differs) || !strings.Contains(msg, fmt.Sprintf("rank %d", odd)) {
						t.Errorf("rank %d: %q does not name rank %d and %q", r, msg, odd, tc.differs)
					}
				}
				t.Logf("rank 0 reports: %v", errs[0])
			})
		}
	}
}

func isMismatch(err error) bool { return errors.Is(err, errs.ErrMismatch) }
