package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flexlink/flexlink/rank"
)

// fewPairs is the last group: only these pairs talk (s -> d). On 2 hosts
// × 4 ranks with 4 rails, 0 -> 5 and 2 -> 5 go through rank 1 (the relay
// on rank 5's rail), 6 -> 3 through rank 7, 4 -> 2 through rank 6; rank 1
// itself is in no pair.
var fewPairs = [][2]int{{0, 5}, {2, 5}, {6, 3}, {4, 2}}

// runGroups runs n groups where every rank sends every other rank a
// message of a seeded random length (the same lengths on every rank; some
// pairs send nothing), then the fewPairs group, checks every element
// against the sender's formula, and prints how many bytes this rank sent
// to other hosts. -kill-after R:K makes rank R die right after group K,
// -kill R:K 20 ms into it.
func runGroups(ctx context.Context, c *rank.Comm, size, n int, kill, killAfter string) error {
	np, me := c.Size(), c.Rank()
	parse := func(v string) (int, int) {
		if v == "" {
			return -1, -1
		}
		a, b, _ := strings.Cut(v, ":")
		r, _ := strconv.Atoi(a)
		k, _ := strconv.Atoi(b)
		return r, k
	}
	killRank, killGroup := parse(killAfter)
	midRank, midGroup := parse(kill)
	die := func() {
		fmt.Fprintf(os.Stderr, "a2a: rank %d kills itself at %d\n", me, time.Now().UnixMilli())
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	cross := 0
	for k := range n + 1 {
		counts := unevenCounts(np, size/4, uint64(100+k))
		if k == n {
			counts = make([][]int, np)
			for s := range counts {
				counts[s] = make([]int, np)
			}
			for i, p := range fewPairs {
				counts[p[0]][p[1]] = size/4 + 1000*i
			}
		}
		var ops []rank.P2P
		recv := make([][]int32, np)
		for p := range np {
			if p == me {
				continue
			}
			if m := counts[me][p]; m > 0 {
				send := make([]int32, m)
				for i := range send {
					send[i] = elem(me, p, i+k)
				}
				ops = append(ops, rank.SendTo(p, rank.Of(send)))
				if c.PeerHost(p) != c.Host() {
					cross += 4 * m
				}
			}
			if m := counts[p][me]; m > 0 {
				recv[p] = make([]int32, m)
				ops = append(ops, rank.RecvFrom(p, rank.Of(recv[p])))
			}
		}
		if me == midRank && k == midGroup {
			time.AfterFunc(20*time.Millisecond, die)
		}
		if len(ops) > 0 {
			if err := c.Group(ctx, ops...); err != nil {
				return fmt.Errorf("group %d: %w", k, err)
			}
		}
		for s, b := range recv {
			for i, x := range b {
				if want := elem(s, me, i+k); x != want {
					return fmt.Errorf("group %d: element %d from rank %d is %x, want %x", k, i, s, x, want)
				}
			}
		}
		if me == killRank && k == killGroup {
			die()
		}
	}
	// The relays' counters are complete once every rank is done (a relay
	// may finish its own groups before carrying its siblings' messages).
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	fmt.Printf("group payload: rank=%d cross_host_bytes=%d\n", me, cross)
	return nil
}

// groupAllToAll is an all-to-all as one Group of a send and a receive per
// peer (PyTorch's all_to_all_single over NCCL's send/recv).
func groupAllToAll(ctx context.Context, c *rank.Comm, send, recv []int32) error {
	n, me := c.Size(), c.Rank()
	blk := len(send) / n
	var ops []rank.P2P
	for p := range n {
		if p != me {
			ops = append(ops, rank.SendTo(p, rank.Of(send[p*blk:(p+1)*blk])), rank.RecvFrom(p, rank.Of(recv[p*blk:(p+1)*blk])))
		}
	}
	copy(recv[me*blk:(me+1)*blk], send[me*blk:(me+1)*blk])
	return c.Group(ctx, ops...)
}
