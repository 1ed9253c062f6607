// Command hello is the smallest flexlink program: it joins the job, prints
// who it is, waits at a barrier for every rank, and exits 0.
//
//	flexrun -np 4 ./hello
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/flexlink/flexlink/rank"
)

func main() {
	ctx := context.Background()
	comm, err := rank.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
	fmt.Printf("hello from rank %d of %d on %s (local rank %d of %d)\n",
		comm.Rank(), comm.Size(), comm.Host(), comm.LocalRank(), comm.LocalSize())
	if err := comm.Barrier(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hello: barrier:", err)
		os.Exit(1)
	}
	if err := comm.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "hello: close:", err)
		os.Exit(1)
	}
}
