// Command spin joins a flexlink job, says so, and runs small allreduces
// until it is killed, the job fails, or -iters is reached: a job that
// stays up for failure tests.
//
//	spin [-iters N] [-env VAR,...]
//
// prints "joined rank R of N host H pid P" and then VAR=value for each
// -env variable (unset: VAR unset), on one line.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"flexlink/dtype"
	"flexlink/rank"
)

func main() {
	iters := flag.Int("iters", 0, "allreduces to run (0: until killed)")
	vars := flag.String("env", "", "comma-separated variables to print after the joined line")
	flag.Parse()
	ctx := context.Background()
	comm, err := rank.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spin:", err)
		os.Exit(1)
	}
	defer comm.Close()
	host, _ := os.Hostname()
	if h := os.Getenv("FLEXLINK_HOSTNAME"); h != "" {
		host = h
	}
	line := fmt.Sprintf("joined rank %d of %d host %s pid %d", comm.Rank(), comm.Size(), host, os.Getpid())
	for _, v := range strings.Split(*vars, ",") {
		if val, ok := os.LookupEnv(v); ok {
			line += " " + v + "=" + val
		} else if v != "" {
			line += " " + v + " unset"
		}
	}
	fmt.Println(line)
	buf := []float64{1}
	// One allreduce per tick: the program stays busy for as long as a test
	// needs it without spinning the machine's two cores.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; *iters == 0 || i < *iters; i++ {
		buf[0] = 1
		if err := comm.AllReduce(ctx, rank.Of(buf), rank.Of(buf), dtype.Sum); err != nil {
			fmt.Fprintf(os.Stderr, "spin: rank %d: %v\n", comm.Rank(), err)
			os.Exit(3)
		}
		if buf[0] != float64(comm.Size()) {
			fmt.Fprintf(os.Stderr, "spin: rank %d: allreduce gave %v, want %d\n", comm.Rank(), buf[0], comm.Size())
			os.Exit(4)
		}
		<-tick.C
	}
}
