// Command job is the job TestForeignConnections attacks: it joins the
// flexlink job flexrun started, as one of two emulated hosts (ranks
// 0..size/2-1 on "lhost0", the others on "lhost1", through
// FLEXLINK_HOSTNAME), so the job opens every kind of listener on one
// machine: the bootstrap's, shm between ranks of a host, netlink across
// hosts and, with FLEXLINK_PXN set, the PXN proxy's. It runs one round
// (an allreduce and an all-to-all, checked) so every listener is open,
// prints
//
//	ready rank R pid P
//
// and waits (at most -wait) for the file -go to appear: the test attacks
// the listeners meanwhile. Then it runs -iters more rounds and prints
//
//	#wrong N rank R
//
// N being the elements that differ from the reference; it exits 1 on any
// error, 4 when N > 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

func main() {
	goFile := flag.String("go", "", "file whose appearance releases the job after the attack")
	wait := flag.Duration("wait", 2*time.Minute, "how long to wait for -go")
	iters := flag.Int("iters", 5, "rounds after the attack")
	flag.Parse()
	me, _ := strconv.Atoi(os.Getenv("FLEXLINK_RANK"))
	size, _ := strconv.Atoi(os.Getenv("FLEXLINK_WORLD_SIZE"))
	os.Setenv("FLEXLINK_HOSTNAME", fmt.Sprintf("lhost%d", me*2/max(size, 1)))
	ctx, cancel := context.WithTimeout(context.Background(), *wait+2*time.Minute)
	defer cancel()
	comm, err := rank.Init(ctx)
	if err != nil {
		fail("init: %v", err)
	}
	defer comm.Close()
	wrong := 0
	round := func(k int) {
		w, err := check(ctx, comm, k)
		if err != nil {
			fail("rank %d: round %d: %v", comm.Rank(), k, err)
		}
		wrong += w
	}
	round(0)
	fmt.Printf("ready rank %d pid %d\n", comm.Rank(), os.Getpid())
	if err := awaitFile(ctx, *goFile, *wait); err != nil {
		fail("rank %d: %v", comm.Rank(), err)
	}
	for k := 1; k <= *iters; k++ {
		round(k)
	}
	fmt.Printf("#wrong %d rank %d\n", wrong, comm.Rank())
	if wrong > 0 {
		os.Exit(4)
	}
}

// check runs round k's allreduce and all-to-all and counts the elements
// that differ from what every rank computes on its own.
func check(ctx context.Context, c *rank.Comm, k int) (int, error) {
	n, me := c.Size(), c.Rank()
	const per = 4096 // elements per all-to-all block: several chunks of the proxy
	val := func(s, d, i int) float64 { return float64(s*1_000_003 + d*1009 + i + k*7) }
	ar := make([]float64, per)
	for i := range ar {
		ar[i] = val(me, 0, i)
	}
	if err := c.AllReduce(ctx, rank.Of(ar), rank.Of(ar), dtype.Sum); err != nil {
		return 0, fmt.Errorf("allreduce: %w", err)
	}
	wrong := 0
	for i := range ar {
		want := 0.0
		for s := range n {
			want += val(s, 0, i)
		}
		if ar[i] != want {
			wrong++
		}
	}
	send, recv := make([]float64, n*per), make([]float64, n*per)
	for d := range n {
		for i := range per {
			send[d*per+i] = val(me, d, i)
		}
	}
	if err := c.AllToAll(ctx, rank.Of(send), rank.Of(recv)); err != nil {
		return wrong, fmt.Errorf("all-to-all: %w", err)
	}
	for s := range n {
		for i := range per {
			if recv[s*per+i] != val(s, me, i) {
				wrong++
			}
		}
	}
	return wrong, nil
}

// awaitFile polls for path until it exists or wait passes.
func awaitFile(ctx context.Context, path string, wait time.Duration) error {
	if path == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s within %v", path, wait)
		case <-t.C:
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "job: "+format+"\n", args...)
	os.Exit(1)
}
