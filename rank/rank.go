// Package rank is the per-process runtime and the public API of flexlink:
// Init reads the launcher's environment and joins the job, and a Comm runs
// collectives among its ranks and splits into sub-communicators.
//
//	comm, err := rank.Init(ctx)
//	defer comm.Close()
//	err = comm.AllReduce(ctx, rank.Of(grads), rank.Of(grads), dtype.Sum)
package rank

import (
	"context"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/comm"
)

// Options configure New. Zero values mean "from the environment".
type Options = comm.Options

// Init joins the job described by the environment that flexrun (or a
// compatible launcher) sets: FLEXLINK_RANK, FLEXLINK_WORLD_SIZE,
// FLEXLINK_BOOTSTRAP, FLEXLINK_JOB_ID, FLEXLINK_JOB_SECRET. With no launcher
// environment at all it returns a world of one rank (like MPI's singleton
// init). Started by srun or mpirun without flexrun, it joins through a
// bootstrap server that rank 0 runs (see docs/LAUNCH.md). It waits at
// most FLEXLINK_BOOTSTRAP_TIMEOUT for every rank to join.
func Init(ctx context.Context) (*Comm, error) {
	c, err := comm.Init(ctx)
	if err != nil {
		return nil, err
	}
	return &Comm{c: c}, nil
}

// New builds the world communicator of a job over an existing bootstrap
// store (Init does this for you; tests use it with bootstrap.NewInProc).
// Every rank of the store must call it.
func New(ctx context.Context, store bootstrap.Store, opt Options) (*Comm, error) {
	c, err := comm.New(ctx, store, opt)
	if err != nil {
		return nil, err
	}
	return &Comm{c: c}, nil
}
