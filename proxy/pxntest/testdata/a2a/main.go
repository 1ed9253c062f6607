// Command a2a runs all-to-all (even blocks) and AllToAllv (random uneven
// counts) on the world communicator, checks every element against the
// sender's formula, and prints each rank's PXN counters. With -bench it
// times AllToAll per size instead and rank 0 prints a busbw table.
// -kill R:N makes rank R kill itself (SIGKILL) 20 ms into call N. With
// -groups it runs groups of sends and receives instead (group.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flexlink/flexlink/rank"
)

func main() {
	size := flag.Int("size", 256<<10, "bytes per peer (even all-to-all)")
	iters := flag.Int("iters", 2, "calls of each kind")
	kill := flag.String("kill", "", "R:N: rank R kills itself during call N")
	bench := flag.String("bench", "", "comma list of bytes per rank to time (busbw table)")
	groups := flag.Int("groups", 0, "run this many groups of sends/receives between every pair (uneven), then one between a few pairs, instead of all-to-alls (group.go)")
	killAfter := flag.String("kill-after", "", "R:K: rank R kills itself after group K")
	groupBench := flag.Bool("group-bench", false, "with -bench: time all-to-alls made of a Group of sends and receives (all_to_all_single's shape) instead of AllToAll")
	gap := flag.Bool("barrier", false, "with -bench: a barrier after each call (timed with it), so that calls do not overlap")
	flag.Parse()
	ctx := context.Background()
	c, err := rank.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "a2a:", err)
		os.Exit(1)
	}
	switch {
	case *groups > 0:
		err = runGroups(ctx, c, *size, *groups, *kill, *killAfter)
	case *bench != "":
		err = runBench(ctx, c, *bench, *iters, *groupBench, *gap)
	default:
		err = run(ctx, c, *size, *iters, *kill)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "a2a: rank %d: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	if st, ok := c.PXNCounters(); ok {
		fmt.Printf("pxn counters: rank=%d %s\n", c.Rank(), st)
	}
	c.Close()
}

func elem(s, d, i int) int32 { return int32(s<<24 | d<<16 | i&0xffff) }

func run(ctx context.Context, c *rank.Comm, size, iters int, kill string) error {
	n, me := c.Size(), c.Rank()
	killRank, killCall := -1, -1
	if kill != "" {
		a, b, _ := strings.Cut(kill, ":")
		killRank, _ = strconv.Atoi(a)
		killCall, _ = strconv.Atoi(b)
	}
	call := 0
	maybeKill := func() {
		if me == killRank && call == killCall {
			time.AfterFunc(20*time.Millisecond, func() {
				fmt.Fprintf(os.Stderr, "a2a: rank %d kills itself at %d\n", me, time.Now().UnixMilli())
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			})
		}
		call++
	}
	blk := size / 4
	for range iters {
		send, recv := make([]int32, n*blk), make([]int32, n*blk)
		for d := range n {
			for i := range blk {
				send[d*blk+i] = elem(me, d, i)
			}
		}
		maybeKill()
		if err := c.AllToAll(ctx, rank.Of(send), rank.Of(recv)); err != nil {
			return err
		}
		for s := range n {
			for i := range blk {
				if want := elem(s, me, i); recv[s*blk+i] != want {
					return fmt.Errorf("alltoall: element %d from rank %d is %x, want %x", i, s, recv[s*blk+i], want)
				}
			}
		}
	}
	for it := range iters {
		counts := unevenCounts(n, blk*2, uint64(it))
		sc, rc := make([]int, n), make([]int, n)
		var send []int32
		tot := 0
		for p := range n {
			sc[p], rc[p] = counts[me][p], counts[p][me]
			for i := range sc[p] {
				send = append(send, elem(me, p, i))
			}
			tot += rc[p]
		}
		recv := make([]int32, tot)
		maybeKill()
		if err := c.AllToAllv(ctx, rank.Of(send), sc, rank.Of(recv), rc); err != nil {
			return err
		}
		off := 0
		for s := range n {
			for i := range rc[s] {
				if want := elem(s, me, i); recv[off+i] != want {
					return fmt.Errorf("alltoallv: element %d from rank %d is %x, want %x", i, s, recv[off+i], want)
				}
			}
			off += rc[s]
		}
	}
	return nil
}

// unevenCounts are the same on every rank (seeded): counts[s][d] elements.
func unevenCounts(n, max int, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 99))
	out := make([][]int, n)
	for s := range out {
		out[s] = make([]int, n)
		for d := range out[s] {
			if rng.IntN(8) > 0 {
				out[s][d] = rng.IntN(max)
			}
		}
	}
	return out
}

// runBench times AllToAll of each size (bytes per rank: the whole send
// buffer) and prints, on rank 0, size, time and busbw = algbw × (n-1)/n
// (nccl-tests), algbw = size / time.
func runBench(ctx context.Context, c *rank.Comm, sizes string, iters int, group, gap bool) error {
	n := c.Size()
	if c.Rank() == 0 {
		fmt.Printf("%12s %12s %10s %10s\n", "bytes", "time_us", "algbw_GBs", "busbw_GBs")
	}
	for _, f := range strings.Split(sizes, ",") {
		b, err := strconv.Atoi(f)
		if err != nil {
			return err
		}
		cnt := b / 4 / n * n
		send, recv := make([]int32, cnt), make([]int32, cnt)
		a2a := func() error { return c.AllToAll(ctx, rank.Of(send), rank.Of(recv)) }
		if group {
			a2a = func() error { return groupAllToAll(ctx, c, send, recv) }
		}
		if err := a2a(); err != nil { // warm-up
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		t0 := time.Now()
		for range iters {
			if err := a2a(); err != nil {
				return err
			}
			if gap {
				if err := c.Barrier(ctx); err != nil {
					return err
				}
			}
		}
		dt := time.Since(t0) / time.Duration(iters)
		if c.Rank() == 0 {
			alg := float64(cnt*4) / dt.Seconds() / 1e9
			fmt.Printf("%12d %12.0f %10.3f %10.3f\n", cnt*4, float64(dt.Microseconds()), alg, alg*float64(n-1)/float64(n))
		}
	}
	return nil
}
