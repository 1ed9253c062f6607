package main

import (
	"context"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

// backend is what flexbench measures: flexlink itself, or (in the build with
// -tags mpi) the MPI library, through the same loop and the same checks.
type backend interface {
	name() string
	rank() int
	size() int
	host(r int) string
	run(ctx context.Context, spec *opSpec, send, recv rank.Data, op dtype.Op, root int) error
	barrier(ctx context.Context) error
	// reduceF64 combines one float64 over all ranks (for agreed timings and
	// #wrong counts).
	reduceF64(ctx context.Context, v float64, op dtype.Op) (float64, error)
	close() error
}

// flexBackend runs collectives through a flexlink communicator.
type flexBackend struct{ c *rank.Comm }

func (b flexBackend) name() string                      { return "flexlink" }
func (b flexBackend) rank() int                         { return b.c.Rank() }
func (b flexBackend) size() int                         { return b.c.Size() }
func (b flexBackend) host(r int) string                 { return b.c.PeerHost(r) }
func (b flexBackend) close() error                      { return b.c.Close() }
func (b flexBackend) barrier(ctx context.Context) error { return b.c.Barrier(ctx) }
func (b flexBackend) run(ctx context.Context, spec *opSpec, send, recv rank.Data, op dtype.Op, root int) error {
	return spec.run(ctx, b.c, send, recv, op, root)
}
func (b flexBackend) reduceF64(ctx context.Context, v float64, op dtype.Op) (float64, error) {
	x := []float64{v}
	err := b.c.AllReduce(ctx, rank.Of(x), rank.Of(x), op)
	return x[0], err
}
