// Command modelparallel shows sub-communicators for model parallelism: 8
// ranks form tensor-parallel groups {0-3} and {4-7} and data-parallel groups
// {0,4} {1,5} {2,6} {3,7} (the layout of NCCL's PXN write-up), and each
// group allreduces on its own communicator, all groups at once. Each rank
// checks its results against the sums it expects.
//
//	flexrun -np 8 ./modelparallel
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

func main() {
	tp := flag.Int("tp", 4, "tensor-parallel group size")
	count := flag.Int("count", 1<<16, "elements per allreduce")
	flag.Parse()
	if err := run(*tp, *count); err != nil {
		fmt.Fprintln(os.Stderr, "modelparallel:", err)
		os.Exit(rank.ExitCode(err))
	}
}

func run(tp, count int) error {
	ctx := context.Background()
	world, err := rank.Init(ctx)
	if err != nil {
		return err
	}
	defer world.Close()
	me, n := world.Rank(), world.Size()
	if tp < 1 || n%tp != 0 {
		return fmt.Errorf("world size %d is not a multiple of -tp %d", n, tp)
	}
	// Tensor-parallel: consecutive ranks. Data-parallel: same position in
	// every tensor-parallel group.
	tpComm, err := world.Split(ctx, me/tp, me)
	if err != nil {
		return fmt.Errorf("tensor-parallel split: %w", err)
	}
	defer tpComm.Close()
	dpComm, err := world.Split(ctx, me%tp, me)
	if err != nil {
		return fmt.Errorf("data-parallel split: %w", err)
	}
	defer dpComm.Close()

	// Both groups reduce at the same time, from two goroutines: their
	// traffic must not mix.
	tpBuf, dpBuf := fill(count, me, 1), fill(count, me, 1000)
	errc := make(chan error, 2)
	go func() { errc <- tpComm.AllReduce(ctx, rank.Of(tpBuf), rank.Of(tpBuf), dtype.Sum) }()
	go func() { errc <- dpComm.AllReduce(ctx, rank.Of(dpBuf), rank.Of(dpBuf), dtype.Sum) }()
	for i := 0; i < 2; i++ {
		if err := <-errc; err != nil {
			return err
		}
	}
	var tpMembers, dpMembers []int
	for r := 0; r < n; r++ {
		if r/tp == me/tp {
			tpMembers = append(tpMembers, r)
		}
		if r%tp == me%tp {
			dpMembers = append(dpMembers, r)
		}
	}
	if err := expect("tensor-parallel", tpBuf, tpMembers, 1); err != nil {
		return fmt.Errorf("rank %d: %w", me, err)
	}
	if err := expect("data-parallel", dpBuf, dpMembers, 1000); err != nil {
		return fmt.Errorf("rank %d: %w", me, err)
	}
	fmt.Printf("rank %d: tp group %v (rank %d of %d), dp group %v (rank %d of %d): sums correct\n",
		me, tpMembers, tpComm.Rank(), tpComm.Size(), dpMembers, dpComm.Rank(), dpComm.Size())
	return world.Barrier(ctx)
}

// fill gives rank r's contribution: element i is scale*(r+1) + i.
func fill(count, r int, scale float64) []float32 {
	b := make([]float32, count)
	for i := range b {
		b[i] = float32(scale*float64(r+1) + float64(i%97))
	}
	return b
}

func expect(what string, got []float32, members []int, scale float64) error {
	for i, v := range got {
		want := 0.0
		for _, r := range members {
			want += scale*float64(r+1) + float64(i%97)
		}
		if float64(v) != want {
			return fmt.Errorf("%s allreduce over %v: element %d = %v, want %v", what, members, i, v, want)
		}
	}
	return nil
}
