package comm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/testenv"
)

// TestChannelRings: 2 hosts × 2 ranks on this machine with NICs lo and
// eth0 (two subnets: two rails). With FLEXLINK_PXN set each rank sends
// from its own NIC (local rank l: NIC l), and the communicator runs its
// ring collectives on two rings whose every cross-host hop joins two
// ranks on one rail, each host sending once from each rail; a 1 MiB
// allreduce over them matches the float64 reference and is bit-identical
// on every rank. With the defaults (every rank on both NICs) and with one
// NIC, one ring in rank order.
func TestChannelRings(t *testing.T) {
	eth0 := testenv.SecondNIC(t)
	const n, per = 4, 2
	host := func(r int) string { return fmt.Sprint("host", r/per) }
	for _, tc := range []struct {
		name  string
		env   map[string]string
		rings int // 0: none (rank order)
	}{
		{"pxn0", map[string]string{"FLEXLINK_PXN": "0", "FLEXLINK_NET_IFNAME": "=lo," + eth0}, 2},
		{"pxn2", map[string]string{"FLEXLINK_PXN": "2", "FLEXLINK_NET_IFNAME": "=lo," + eth0}, 2},
		{"defaults", map[string]string{"FLEXLINK_NET_IFNAME": "=lo," + eth0}, 0},
		{"pxn0 one NIC", map[string]string{"FLEXLINK_PXN": "0", "FLEXLINK_NET_IFNAME": "=lo"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_DEBUG": "INFO"}
			for k, v := range tc.env {
				env[k] = v
			}
			const count = 1 << 18 // float32: 1 MiB
			var mu sync.Mutex
			results := make([][]byte, n)
			rings := make([][][]int, n)
			subnets := make([]string, n)
			logs := runLoggedHosts(t, n, env, host, func(c *Comm) error {
				buf := make([]byte, 4*count)
				for i := range count {
					binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(ringInput(c.Rank(), i)))
				}
				err := c.Run(context.Background(), "allreduce", func(ctx context.Context) error {
					return c.Engine().AllReduce(ctx, collectives.HostBuffer(buf), collectives.HostBuffer(buf), count, dtype.Float32, dtype.Sum)
				})
				mu.Lock()
				defer mu.Unlock()
				results[c.Rank()], rings[c.Rank()] = buf, c.Engine().Config().Rings
				if rs := c.world.net.rails[c.WorldRank()]; len(rs) == 1 {
					subnets[c.Rank()] = rs[0].Subnet
				}
				return err
			})
			for r := range n {
				if !reflect.DeepEqual(rings[r], rings[0]) {
					t.Fatalf("rank %d has rings %v, rank 0 %v", r, rings[r], rings[0])
				}
				if !bytes.Equal(results[r], results[0]) {
					t.Errorf("rank %d's result differs from rank 0's (must be bit-identical)", r)
				}
			}
			for i := range count {
				want := 0.0
				for r := range n {
					want += float64(ringInput(r, i))
				}
				if got := math.Float32frombits(binary.LittleEndian.Uint32(results[0][4*i:])); float64(got) != want {
					t.Fatalf("element %d: %v, want %v", i, got, want)
				}
			}
			if len(rings[0]) != tc.rings {
				t.Fatalf("%d rings %v, want %d", len(rings[0]), rings[0], tc.rings)
			}
			sent := map[string]int{} // host/subnet -> cross-host hops sent
			for l, ring := range rings[0] {
				for i, a := range ring {
					b := ring[(i+1)%n]
					if host(a) == host(b) {
						continue
					}
					if subnets[a] != subnets[b] {
						t.Errorf("ring %d %v: hop %d→%d from subnet %s to %s (not rail-aligned)", l, ring, a, b, subnets[a], subnets[b])
					}
					sent[host(a)+" "+subnets[a]]++
				}
			}
			if tc.rings > 0 {
				if len(sent) != 4 {
					t.Errorf("cross-host hops by host and rail: %v, want one from each rail of each host", sent)
				}
				for k, v := range sent {
					if v != 1 {
						t.Errorf("%s sends %d ring hops, want 1", k, v)
					}
				}
				if f := fields(logs[0], "ring collectives over every rail", 0); f == nil || strings.Trim(f["rings"], `"`) != ringsText(rings[0]) {
					t.Errorf("rank 0 logged %v, want the rings %v", f, rings[0])
				}
			}
			t.Logf("rings %v, subnets %v", rings[0], subnets)
		})
	}
}

// ringInput is rank r's element i: small integers, exact in float32 sums.
func ringInput(r, i int) float32 { return float32((r*7+i*3)%101 - 50) }
