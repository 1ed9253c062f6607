package collectives_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
)

// ringSets are Config.Rings cases: the rings pxn.Rings plans for 2 hosts
// × 2 ranks × 2 NICs and 2 hosts × 4 ranks × 2 NICs, rings that share
// every directed link (a ring twice; a ring and its reverse's rotation),
// and seeded random orders.
func ringSets() []struct {
	name  string
	rings [][]int
} {
	rnd := rand.New(rand.NewPCG(7, 31))
	random := func(n, k int) [][]int {
		out := make([][]int, k)
		for i := range out {
			out[i] = rnd.Perm(n)
		}
		return out
	}
	return []struct {
		name  string
		rings [][]int
	}{
		{"2x2x2", [][]int{{1, 0, 2, 3}, {0, 1, 3, 2}}},
		{"2x4x2", [][]int{{1, 0, 3, 2, 4, 5, 6, 7}, {0, 1, 2, 3, 5, 4, 7, 6}}},
		{"same ring twice", [][]int{{0, 1, 2}, {0, 1, 2}}},
		{"shared links", [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}}},
		{"one permuted ring", [][]int{{2, 0, 3, 1}}},
		{"random 5x4", random(5, 4)},
		{"random 8x3", random(8, 3)},
	}
}

// TestRings runs the ring collectives (allreduce, reduce-scatter,
// allgather) with several rings at once against the serial reference
// (float64 for the reductions; allreduce bit-identical on every rank),
// over every dtype, in and out of place, counts that leave rings and
// chunks uneven, on the ideal, segmented and jittered fake fabrics.
func TestRings(t *testing.T) {
	for _, set := range ringSets() {
		n := len(set.rings[0])
		for _, coll := range []string{"allreduce", "reducescatter", "allgather"} {
			for fi, fab := range fabrics {
				t.Run(fmt.Sprintf("%s/%s/%s", set.name, coll, fab.name), func(t *testing.T) {
					sweepDTypes(t, n, fi, coll, collectives.Config{Algo: "ring", ChunkBytes: 40, Rings: set.rings})
				})
			}
		}
	}
}

// TestRingsCarryTheirShare: the bytes of an allreduce with the 2x2x2
// rings go over the rings' links only, about half over each ring: the
// links 1→2 and 3→0 that the rank-order ring would use carry nothing,
// and every rank sends 2(n-1)/n of the data in all.
func TestRingsCarryTheirShare(t *testing.T) {
	const n, count = 4, 1 << 16 // float32
	rings := [][]int{{1, 0, 2, 3}, {0, 1, 3, 2}}
	nw := fake.NewNetwork(n, fake.Options{MaxSegment: 4096, Seed: 3})
	var sent [n][n]atomic.Int64
	w := &world{n: n, nw: nw, abort: nw.Abort}
	for r := range n {
		links := nw.Links(r)
		for p, l := range links {
			if l != nil {
				links[p] = countingLink{Link: l, sent: &sent[r][p]}
			}
		}
		p := collectives.NewLinkPeers(r, n, links)
		w.engines = append(w.engines, collectives.NewEngine(0xc0ffee, p, collectives.HostMemory{},
			collectives.Config{Algo: "ring", ChunkBytes: 16 << 10, Rings: rings}))
	}
	runCase(t, w, collCase{coll: "allreduce", dt: dtype.Float32, op: dtype.Sum, count: count, seed: 5})
	onRing := map[[2]int]int{}
	for l, ring := range rings {
		for i, a := range ring {
			onRing[[2]int{a, ring[(i+1)%n]}] = l
		}
	}
	var table strings.Builder
	for a := range n {
		total := int64(0)
		for b := range n {
			got := sent[a][b].Load()
			total += got
			fmt.Fprintf(&table, "%d→%d %d  ", a, b, got)
			if _, ok := onRing[[2]int{a, b}]; !ok && got != 0 {
				t.Errorf("rank %d sent %d bytes to rank %d, on no ring's link", a, got, b)
			}
			// Each ring moves 2(n-1)/n of its half of the data over
			// each of its links.
			if _, ok := onRing[[2]int{a, b}]; ok {
				want := int64(2*(n-1)) * count * 4 / int64(2*n)
				if got < want*9/10 || got > want*11/10 {
					t.Errorf("rank %d sent %d bytes to rank %d, want about %d (half the data's ring share)", a, got, b, want)
				}
			}
		}
		if want := int64(2*(n-1)) * count * 4 / n; total < want*9/10 || total > want*11/10 {
			t.Errorf("rank %d sent %d bytes in all, want about %d", a, total, want)
		}
	}
	t.Log(table.String())
}

// countingLink counts the bytes posted to Send.
type countingLink struct {
	fabric.Link
	sent *atomic.Int64
}

func (l countingLink) Send(tag fabric.Tag, buf []byte) fabric.Request {
	l.sent.Add(int64(len(buf)))
	return l.Link.Send(tag, buf)
}

// TestRingsChecked: rings that are not orders of the communicator's ranks
// fail every call with an error naming the ring.
func TestRingsChecked(t *testing.T) {
	for _, rings := range [][][]int{{{0, 1}}, {{0, 1, 1}}, {{0, 1, 2}, {0, 3, 1}}} {
		w := newWorld(3, fake.Options{}, collectives.Config{Rings: rings})
		errs := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
			b := make([]byte, 12)
			return e.AllReduce(ctx, collectives.HostBuffer(b), collectives.HostBuffer(b), 3, dtype.Float32, dtype.Sum)
		})
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "ring") {
				t.Errorf("rings %v: rank %d: %v, want an error naming the ring", rings, r, err)
			}
		}
	}
}

// sweepDTypes runs coll on n ranks of fabric fi with cfg over every dtype,
// in and out of place, counts 0, 1, 7 and 1000 (the ops in turn), against
// the serial reference; the jittered fabric takes every fab.every-th case.
func sweepDTypes(t *testing.T, n, fi int, coll string, cfg collectives.Config) {
	t.Helper()
	fab := fabrics[fi]
	w := newWorld(n, fab.opt, cfg)
	idx := 0
	for _, dt := range dtype.All() {
		for _, inPlace := range []bool{false, true} {
			for _, count := range []int{0, 1, 7, 1000} {
				idx++
				if idx%fab.every != 0 && fi > 0 {
					continue
				}
				c := collCase{coll: coll, dt: dt, count: count, inPlace: inPlace, seed: uint64(idx),
					op: dtype.Ops()[(idx+n)%len(dtype.Ops())]}
				if !runCase(t, w, c) {
					w = newWorld(n, fab.opt, cfg)
				}
			}
		}
	}
}
