// Command external is a program in a module of its own that uses flexlink
// the way another project does: it requires github.com/flexlink/flexlink
// and, until that path is published, replaces it with a checkout (go.mod:
// replace github.com/flexlink/flexlink => ../..). It joins the job, checks
// an allreduce and an allreduce on a sub-communicator against the sums
// worked out by hand, and prints one line from rank 0.
//
//	cd examples/external && go build -o external . && flexrun -np 4 --oversubscribe ./external
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "external:", err)
		os.Exit(rank.ExitCode(err)) // 75 when a peer was lost: flexrun then names that peer, not this rank
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	comm, err := rank.Init(ctx) // joins the job flexrun (or srun, or mpirun) started; alone: a world of one
	if err != nil {
		return err
	}
	defer comm.Close()
	n, r := comm.Size(), comm.Rank()

	v := []float64{float64(r), 1}
	if err := comm.AllReduce(ctx, rank.Of(v), rank.Of(v), dtype.Sum); err != nil { // in place
		return err
	}
	if want := float64(n * (n - 1) / 2); v[0] != want || v[1] != float64(n) {
		return fmt.Errorf("rank %d: allreduce gave %v, want [%v %v]", r, v, want, n)
	}

	half, err := comm.Split(ctx, r%2, r) // even and odd ranks
	if err != nil {
		return err
	}
	defer half.Close()
	w := []int32{int32(r)}
	if err := half.AllReduce(ctx, rank.Of(w), rank.Of(w), dtype.Sum); err != nil {
		return err
	}
	var want int32
	for i := r % 2; i < n; i += 2 {
		want += int32(i)
	}
	if w[0] != want {
		return fmt.Errorf("rank %d: allreduce on its half gave %d, want %d", r, w[0], want)
	}
	if r == 0 {
		fmt.Printf("external: %d ranks agree (sum of ranks %v, even ranks %d)\n", n, v[0], w[0])
	}
	return nil
}
