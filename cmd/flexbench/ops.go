package main

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

// opSpec describes one benchmarked collective the way nccl-tests does: how a
// "size" in bytes maps to element counts, the bus-bandwidth factor, how to
// run it, and what every element of the result must be.
type opSpec struct {
	name    string
	reduces bool // has a reduction operator
	rooted  bool // has a root
	// counts returns the send and recv element counts and the count column
	// for a size of `elems` elements on n ranks (elems already rounded).
	counts func(elems, n int) (send, recv int)
	// round rounds an element count down to what the op can run.
	round func(elems, n int) int
	bus   func(n int) float64
	run   func(ctx context.Context, c *rank.Comm, send, recv rank.Data, op dtype.Op, root int) error
	// input is rank r's send element i; expect is this rank's recv element
	// i (ok=false: not significant on this rank).
	input  func(r, i, n int, op dtype.Op) float64
	expect func(me, i, n, sendCount int, op dtype.Op, root int) (v float64, ok bool)
}

func one(int) float64           { return 1 }
func same(elems, _ int) int     { return elems }
func multiple(elems, n int) int { return elems / n * n }

// Inputs are small integers so every dtype (int8 and float16 included)
// holds every partial result exactly; the reference is then exact too.
func reduceInput(r, i, n int, op dtype.Op) float64 {
	switch op {
	case dtype.Prod:
		if i%n == r {
			return 2
		}
		return 1
	case dtype.Min, dtype.Max:
		return float64((r*3 + i) % 7)
	default:
		return float64((r + i) % 4)
	}
}

func plainInput(r, i, _ int, _ dtype.Op) float64 { return float64((r*5 + i) % 11) }

// fold is the float64 reference reduction of element i over all ranks.
func fold(i, n int, op dtype.Op, in func(r, i, n int, op dtype.Op) float64) float64 {
	return dtype.Fold(op, dtype.Float64, n, func(r int) float64 { return in(r, i, n, op) })
}

func ops() map[string]*opSpec {
	return map[string]*opSpec{
		"allreduce": {
			name: "allreduce", reduces: true, round: same,
			counts: func(e, _ int) (int, int) { return e, e },
			bus:    func(n int) float64 { return 2 * float64(n-1) / float64(n) },
			run: func(ctx context.Context, c *rank.Comm, s, r rank.Data, op dtype.Op, _ int) error {
				return c.AllReduce(ctx, s, r, op)
			},
			input: reduceInput,
			expect: func(_, i, n, _ int, op dtype.Op, _ int) (float64, bool) {
				return fold(i, n, op, reduceInput), true
			},
		},
		"allgather": {
			name: "allgather", round: multiple,
			counts: func(e, n int) (int, int) { return e / n, e },
			bus:    func(n int) float64 { return float64(n-1) / float64(n) },
			run: func(ctx context.Context, c *rank.Comm, s, r rank.Data, _ dtype.Op, _ int) error {
				return c.AllGather(ctx, s, r)
			},
			input: plainInput,
			expect: func(_, i, n, sc int, op dtype.Op, _ int) (float64, bool) {
				return plainInput(i/sc, i%sc, n, op), true
			},
		},
		"reducescatter": {
			name: "reducescatter", reduces: true, round: multiple,
			counts: func(e, n int) (int, int) { return e, e / n },
			bus:    func(n int) float64 { return float64(n-1) / float64(n) },
			run: func(ctx context.Context, c *rank.Comm, s, r rank.Data, op dtype.Op, _ int) error {
				return c.ReduceScatter(ctx, s, r, op)
			},
			input: reduceInput,
			expect: func(me, i, n, sc int, op dtype.Op, _ int) (float64, bool) {
				return fold(me*(sc/n)+i, n, op, reduceInput), true
			},
		},
		"broadcast": {
			name: "broadcast", rooted: true, round: same, bus: one,
			counts: func(e, _ int) (int, int) { return e, e },
			run: func(ctx context.Context, c *rank.Comm, s, r rank.Data, _ dtype.Op, root int) error {
				return c.Broadcast(ctx, s, r, root)
			},
			input: plainInput,
			expect: func(_, i, n, _ int, op dtype.Op, root int) (float64, bool) {
				return plainInput(root, i, n, op), true
			},
		},
		"reduce": {
			name: "reduce", reduces: true, rooted: true, round: same, bus: one,
			counts: func(e, _ int) (int, int) { return e, e },
			run: func(ctx context.Context, c *rank.Comm, s, r rank.Data, op dtype.Op, root int) error {
				return c.Reduce(ctx, s, r, op, root)
			},
			input: reduceInput,
			expect: func(me, i, n, _ int, op dtype.Op, root int) (float64, bool) {
				return fold(i, n, op, reduceInput), me == root
			},
		},
		"alltoall": {
			name: "alltoall", round: multiple,
			counts: func(e, _ int) (int, int) { return e, e },
			bus:    func(n int) float64 { return float64(n-1) / float64(n) },
			run: func(ctx context.Context, c *rank.Comm, s, r rank.Data, _ dtype.Op, _ int) error {
				return c.AllToAll(ctx, s, r)
			},
			input: plainInput,
			expect: func(me, i, n, sc int, op dtype.Op, _ int) (float64, bool) {
				per := sc / n
				return plainInput(i/per, me*per+i%per, n, op), true
			},
		},
		"sendrecv": {
			name: "sendrecv", round: same, bus: one,
			counts: func(e, _ int) (int, int) { return e, e },
			run: func(ctx context.Context, c *rank.Comm, s, r rank.Data, _ dtype.Op, _ int) error {
				n, me := c.Size(), c.Rank()
				if n == 1 {
					copy(r.Buf.(collectives.HostBuffer).Bytes(), s.Buf.(collectives.HostBuffer).Bytes())
					return nil
				}
				return c.Group(ctx, rank.SendTo((me+1)%n, s), rank.RecvFrom((me+n-1)%n, r))
			},
			input: plainInput,
			expect: func(me, i, n, _ int, op dtype.Op, _ int) (float64, bool) {
				return plainInput((me+n-1)%n, i, n, op), true
			},
		},
	}
}

func opNames() string {
	return "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv"
}

func lookupOp(name string) (*opSpec, error) {
	s, ok := ops()[name]
	if !ok {
		return nil, fmt.Errorf("unknown collective %q (want one of %s)", name, opNames())
	}
	return s, nil
}
