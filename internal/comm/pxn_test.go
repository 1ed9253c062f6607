package comm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
	"github.com/flexlink/flexlink/internal/worldtest"
	"github.com/flexlink/flexlink/proxy"
)

// TestPXNAllToAll: 2 hosts × 4 ranks on this machine, NICs lo and eth0
// (or the first other NIC; two subnets: two rails; local ranks 0 and 2 own lo, 1 and 3 eth0),
// all-to-all with even and random uneven blocks through the PXN proxy at
// levels 0 (every rank sends from its own NIC) and 2 (relayed to the
// destination's rail), every byte checked against the sender's formula.
func TestPXNAllToAll(t *testing.T) {
	eth0 := testenv.SecondNIC(t)
	const hosts, per = 2, 4
	n := hosts * per
	for _, c := range []struct {
		level    string
		receives int64 // receives posted per all-to-all (even blocks), over all ranks
		relayed  int64
	}{
		// Level 0: one receive per cross-host message: 8 ranks × 4.
		{"0", 32, 0},
		// Level 2: a rank's messages for d leave from the first local
		// rank on d's rail (two rails, so two relays per host), which
		// carries 2 senders' messages: one receive per (relay, dst),
		// 8 ranks × 2 relays, 2 buffers each; half the messages relayed.
		{"2", 16, 16},
	} {
		t.Run("level"+c.level, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + eth0, "FLEXLINK_PXN": c.level}
			lens := [][][]int{testenv.EvenLengths(n, 3000), randLens(n, 20000, 1), randLens(n, 5000, 2)}
			stats := runPXN(t, hosts, per, env, lens)
			if stats[0].Receives != c.receives || stats[0].Relayed != c.relayed {
				t.Errorf("even all-to-all: %+v, want %d receives and %d relayed", stats[0], c.receives, c.relayed)
			}
			for i, s := range stats {
				t.Logf("call %d: %s", i, s)
			}
		})
	}
}

func randLens(n, max int, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := testenv.EvenLengths(n, 0)
	for s := range out {
		for d := range out[s] {
			if rng.IntN(5) > 0 {
				out[s][d] = rng.IntN(max)
			}
		}
	}
	return out
}

func pxnByte(s, d, i int) byte { return byte(s*37 + d*11 + i + i>>9) }

// runPXN runs one all-to-all per entry of calls (calls[k][s][d] bytes from
// s to d) on hosts × per ranks and checks what every rank receives; it
// returns each call's counters summed over the ranks.
func runPXN(t *testing.T, hosts, per int, env map[string]string, calls [][][]int) []proxy.Stats {
	t.Helper()
	n := hosts * per
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	stats := make([]proxy.Stats, len(calls))
	errs := worldtest.Run(t, worldtest.Spec{N: n, Env: env, Host: worldtest.PerHost(per)}, New, func(c *Comm) error {
		r := c.Rank()
		for k, lens := range calls {
			send, recv := testenv.AllToAllBuffers(lens, r, pxnByte)
			before, _ := c.PXNStats()
			var ok bool
			if err := c.Run(ctx, "alltoallv", func(ctx context.Context) error {
				var err error
				ok, err = c.PXNAllToAllv(ctx, send, recv)
				return err
			}); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("PXN was not used")
			}
			for s := range n {
				for i, b := range recv[s] {
					if want := pxnByte(s, r, i); b != want {
						return fmt.Errorf("call %d: byte %d from rank %d is %d, want %d", k, i, s, b, want)
					}
				}
			}
			after, _ := c.PXNStats()
			mu.Lock()
			d := &stats[k]
			d.Bytes += after.Bytes - before.Bytes
			d.Messages += after.Messages - before.Messages
			d.Relayed += after.Relayed - before.Relayed
			d.Received += after.Received - before.Received
			d.Receives += after.Receives - before.Receives
			d.Buffers += after.Buffers - before.Buffers
			mu.Unlock()
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return stats
}

// TestPXNInfoLine: with FLEXLINK_DEBUG=INFO every PXN all-to-all logs one
// line with its counters.
func TestPXNInfoLine(t *testing.T) {
	vars := map[string]string{"FLEXLINK_DEBUG": "INFO", "FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp",
		"FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t), "FLEXLINK_PXN": "2"}
	const n = 4
	logs := runLoggedHosts(t, n, vars, func(r int) string { return fmt.Sprint("host", r/2) }, func(c *Comm) error {
		for range 2 {
			send, recv := make([][]byte, n), make([][]byte, n)
			for i := range send {
				send[i], recv[i] = make([]byte, 100), make([]byte, 100)
			}
			if err := c.Run(context.Background(), "alltoall", func(ctx context.Context) error {
				_, err := c.PXNAllToAllv(ctx, send, recv)
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	})
	for r, log := range logs {
		if k := strings.Count(log, "pxn all-to-all:"); k != 2 {
			t.Errorf("rank %d: %d pxn all-to-all lines, want 2:\n%s", r, k, log)
		}
		f := fields(log, "pxn all-to-all", 0)
		if f == nil || f["nic"] == "" || f["messages"] != "2" || f["receives"] != "1" || f["buffers_per_receive"] != "2.00" {
			t.Errorf("rank %d: line %v", r, f)
		}
	}
}
