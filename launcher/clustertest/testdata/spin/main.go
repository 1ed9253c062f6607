// Command spin joins a flexlink job, says so, and runs small allreduces
// until it is killed, the job fails, or -iters is reached: a job that
// stays up for failure tests.
//
//	spin [-iters N] [-env VAR,...] [-tick D] [-fail-rank R -fail-after D -fail-code C] [-lost-code C]
//	     [-bad-rank R -bad HOW -bad-at K] [-say-first]
//
// prints "joined rank R of N host H pid P" and then VAR=value for each
// -env variable (unset: VAR unset), on one line. An allreduce that fails
// because a peer was lost ends the rank with -lost-code (by default
// launcher.ExitPeerLost, which tells flexrun that this rank is not the
// job's cause), any other failure with 3; -fail-rank's rank exits with
// -fail-code at its first iteration -fail-after past the joined line, but
// not before the first allreduce is done (its peers are then inside the
// next allreduce, waiting for it).
//
// -bad-rank's rank misbehaves as -bad says, at its call number -bad-at
// (from 0; the others are then inside that call, waiting for it):
//
//	exit-before-join  exits 0 before it joins the job (-bad-at unused)
//	never-join        never joins: it waits (at most 5 minutes) to be killed
//	wrong-size        joins claiming a world size one larger than the job's
//	exit-no-close     exits 0 without closing its communicator
//	close             closes its communicator and exits 0 (one call fewer)
//	op                calls AllGather where the others call AllReduce
//	count             calls AllReduce with 2 elements where the others use 1
//	dtype             calls AllReduce on float32 where the others use float64
//	root              every rank calls Broadcast at -bad-at, this one with root 1, the others root 0
//	withhold          never makes the call: it waits (at most 5 minutes) to be killed
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/launcher"
	"github.com/flexlink/flexlink/rank"
)

func main() {
	iters := flag.Int("iters", 0, "allreduces to run (0: until killed)")
	vars := flag.String("env", "", "comma-separated variables to print after the joined line")
	tick := flag.Duration("tick", 20*time.Millisecond, "one allreduce per tick (0: back to back)")
	failRank := flag.Int("fail-rank", -1, "rank that exits with -fail-code after -fail-after")
	failAfter := flag.Duration("fail-after", 0, "when -fail-rank exits, counted from its joined line")
	failCode := flag.Int("fail-code", 3, "exit code of -fail-rank")
	lostCode := flag.Int("lost-code", launcher.ExitPeerLost, "exit code when an allreduce fails because a peer was lost")
	badRank := flag.Int("bad-rank", -1, "rank that misbehaves as -bad says")
	bad := flag.String("bad", "", "how -bad-rank misbehaves (see the package comment)")
	badAt := flag.Int("bad-at", 1, "call number at which -bad-rank misbehaves")
	sayFirst := flag.Bool("say-first", false, `print "first call done rank R" once the first allreduce is done (its links are up)`)
	flag.Parse()
	ctx := context.Background()
	me := -1
	if r, err := strconv.Atoi(os.Getenv("FLEXLINK_RANK")); err == nil {
		me = r
	}
	if me == *badRank {
		switch *bad {
		case "exit-before-join":
			os.Exit(0)
		case "never-join":
			time.Sleep(5 * time.Minute) // flexrun ends it
			os.Exit(0)
		case "wrong-size":
			n, _ := strconv.Atoi(os.Getenv("FLEXLINK_WORLD_SIZE"))
			os.Setenv("FLEXLINK_WORLD_SIZE", strconv.Itoa(n+1))
		}
	}
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
	failAt := time.Now().Add(*failAfter)
	buf := []float64{1}
	// One allreduce per tick: the program stays busy for as long as a test
	// needs it without spinning the machine's two cores.
	var tickC <-chan time.Time
	if *tick > 0 {
		t := time.NewTicker(*tick)
		defer t.Stop()
		tickC = t.C
	}
	for i := 0; *iters == 0 || i < *iters; i++ {
		// Not before the first allreduce is done: its links are up then,
		// and the peers' errors say that a peer was lost.
		if comm.Rank() == *failRank && i > 0 && !time.Now().Before(failAt) {
			os.Exit(*failCode)
		}
		buf[0] = 1
		var err error
		switch {
		case i == *badAt && *bad == "root":
			root := 0
			if comm.Rank() == *badRank {
				root = 1
			}
			buf[0] = float64(comm.Size())
			err = comm.Broadcast(ctx, rank.Of(buf), rank.Of(buf), root)
		case i == *badAt && comm.Rank() == *badRank:
			err = misbehave(ctx, comm, *bad)
		default:
			err = comm.AllReduce(ctx, rank.Of(buf), rank.Of(buf), dtype.Sum)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "spin: rank %d: %v\n", comm.Rank(), err)
			if errors.Is(err, rank.ErrPeerLost) {
				os.Exit(*lostCode)
			}
			os.Exit(3)
		}
		if buf[0] != float64(comm.Size()) {
			fmt.Fprintf(os.Stderr, "spin: rank %d: allreduce gave %v, want %d\n", comm.Rank(), buf[0], comm.Size())
			os.Exit(4)
		}
		if i == 0 && *sayFirst {
			fmt.Printf("first call done rank %d\n", comm.Rank())
		}
		if tickC != nil {
			<-tickC
		}
	}
}

// misbehave makes the call -bad asks for instead of the others' allreduce
// (or ends the process).
func misbehave(ctx context.Context, comm *rank.Comm, how string) error {
	switch how {
	case "exit-no-close":
		os.Exit(0)
	case "close":
		if err := comm.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "spin: rank %d: close: %v\n", comm.Rank(), err)
		}
		os.Exit(0)
	case "op":
		out := make([]float64, comm.Size())
		return comm.AllGather(ctx, rank.Of([]float64{1}), rank.Of(out))
	case "count":
		b := []float64{1, 1}
		return comm.AllReduce(ctx, rank.Of(b), rank.Of(b), dtype.Sum)
	case "dtype":
		b := []float32{1}
		return comm.AllReduce(ctx, rank.Of(b), rank.Of(b), dtype.Sum)
	case "withhold":
		time.Sleep(5 * time.Minute) // flexrun ends it
		os.Exit(0)
	}
	return fmt.Errorf("-bad %q: unknown", how)
}
