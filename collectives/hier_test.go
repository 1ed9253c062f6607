package collectives_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/fake"
)

// hostSets are Config.Hosts cases: the ranks of each host, hosts in rank
// order or not, of 2–4 ranks; and hosts of unequal sizes (or one rank
// each), where allreduce goes by the flat ring.
var hostSets = []struct {
	name   string
	hosts  [][]int
	byHost bool
}{
	{"2x2", [][]int{{0, 1}, {2, 3}}, true},
	{"2x2 interleaved", [][]int{{0, 2}, {1, 3}}, true},
	{"3x2", [][]int{{0, 1}, {2, 3}, {4, 5}}, true},
	{"2x3, hosts' rings not in rank order", [][]int{{2, 0, 1}, {5, 3, 4}}, true},
	{"2x4", [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}, true},
	{"unequal hosts", [][]int{{0, 1, 2}, {3}}, false},
	{"one rank a host", [][]int{{0}, {1}, {2}}, false},
}

// TestHier runs allreduce by host (Config.Hosts) against the float64
// reference, bit-identical on every rank, over every dtype and op, in and
// out of place, counts that leave hosts, segments and chunks uneven, on
// the ideal, segmented and jittered fake fabrics; and checks that the
// calls took the algorithm by host exactly where the hosts allow it.
func TestHier(t *testing.T) {
	for _, set := range hostSets {
		n := 0
		for _, h := range set.hosts {
			n += len(h)
		}
		for fi, fab := range fabrics {
			t.Run(fmt.Sprintf("%s/%s", set.name, fab.name), func(t *testing.T) {
				sweepDTypes(t, n, fi, "allreduce", collectives.Config{Algo: collectives.AlgoHier, ChunkBytes: 40, Hosts: set.hosts})
			})
		}
	}
}

// TestHierChosen: allreduce goes by host at or above the threshold where
// Config.Hosts allows (auto and hier), by recursive doubling below it
// (auto), and never with FLEXLINK_ALGO=ring, on every rank.
func TestHierChosen(t *testing.T) {
	for _, set := range hostSets {
		n := 0
		for _, h := range set.hosts {
			n += len(h)
		}
		large := collectives.AlgoRing
		if set.byHost {
			large = collectives.AlgoHier
		}
		for _, tc := range []struct {
			algo        string
			small, want string // the algorithm of 16 and of 1024 elements
		}{
			{collectives.AlgoAuto, collectives.AlgoRD, large},
			{collectives.AlgoHier, large, large},
			{collectives.AlgoRing, collectives.AlgoRing, collectives.AlgoRing},
		} {
			t.Run(set.name+"/"+tc.algo, func(t *testing.T) {
				w := newWorld(n, fake.Options{}, collectives.Config{Algo: tc.algo, Threshold: 1024, Hosts: set.hosts})
				seen := make([][]string, n)
				for r, e := range w.engines {
					e.SetObserver(func(c collectives.Call) {
						if c.End {
							seen[r] = append(seen[r], c.Algo)
						}
					})
				}
				errs := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
					for _, count := range []int{16, 1024} {
						b := make(collectives.HostBuffer, count*4)
						if err := e.AllReduce(ctx, b, b, count, dtype.Float32, dtype.Sum); err != nil {
							return err
						}
					}
					return nil
				})
				for r := range n {
					if errs[r] != nil {
						t.Fatalf("rank %d: %v", r, errs[r])
					}
					if want := []string{tc.small, tc.want}; fmt.Sprint(seen[r]) != fmt.Sprint(want) {
						t.Errorf("rank %d: algorithms %v, want %v", r, seen[r], want)
					}
				}
			})
		}
	}
}

// TestHostsChecked: hosts that are not a partition of the ranks make
// every call fail, saying so.
func TestHostsChecked(t *testing.T) {
	for _, hosts := range [][][]int{{{0, 1}, {1, 2}}, {{0, 1}}, {{0, 1}, {2, 5}}} {
		w := newWorld(3, fake.Options{}, collectives.Config{Hosts: hosts})
		errs := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
			b := make(collectives.HostBuffer, 8)
			return e.AllReduce(ctx, b, b, 2, dtype.Float32, dtype.Sum)
		})
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "not a partition") {
				t.Errorf("hosts %v: rank %d: %v, want the hosts refused", hosts, r, err)
			}
		}
	}
}
