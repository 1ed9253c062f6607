package pxn

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/flexlink/flexlink/fabric/topo"
)

// TestRingsGolden: the rings of small emulated-cluster shapes (hosts
// without GPUs, NIC ethR on rail R, local rank l owning NIC l mod rails),
// worked by hand from Rings' rule: ring c crosses from host i to host i+1
// on rail (c+i) mod R, the host's first rank on the ring owns the NIC of
// the rail it was entered on, its last the NIC of the rail it leaves on.
func TestRingsGolden(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		hosts, perHost, rails int
		want                  [][]int
	}{
		// Ranks 0, 1 on host0 (rail0, rail1), 2, 3 on host1. Ring 0:
		// 0→2 on rail0, 3→1 on rail1; ring 1: 1→3 on rail1, 2→0 on
		// rail0. Each host sends once from each NIC.
		{"2 hosts x 2 ranks x 2 NICs", 2, 2, 2, [][]int{{1, 0, 2, 3}, {0, 1, 3, 2}}},
		// Two ranks per rail per host: ring 0 leaves host0 from rank 2
		// (rail0) into rank 4 (rail0) and host1 from 7 (rail1) into 1
		// (rail1); ring 1 the other rails.
		{"2 hosts x 4 ranks x 2 NICs", 2, 4, 2, [][]int{{1, 0, 3, 2, 4, 5, 6, 7}, {0, 1, 2, 3, 5, 4, 7, 6}}},
		// Rails alternate between the hosts around the ring: ring 0
		// crosses on rail 0, 1, 0, 1 (0→2, 3→5, 4→6, 7→1).
		{"4 hosts x 2 ranks x 2 NICs", 4, 2, 2, [][]int{{1, 0, 2, 3, 5, 4, 6, 7}, {0, 1, 3, 2, 4, 5, 7, 6}}},
		// One NIC per host: one ring in rank order, as before.
		{"2 hosts x 2 ranks x 1 NIC", 2, 2, 1, [][]int{{0, 1, 2, 3}}},
		{"4 hosts x 2 ranks x 1 NIC", 4, 2, 1, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}},
		// One host: nothing crosses.
		{"1 host x 4 ranks x 2 NICs", 1, 4, 2, [][]int{{0, 1, 2, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hosts []*topo.Host
			for i := range tc.hosts {
				hosts = append(hosts, cpuHost(fmt.Sprintf("host%d", i), tc.rails))
			}
			got := Rings(world(t, tc.perHost, hosts...))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rings %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRingsProperties checks, over many shapes, what the collectives and
// the rails rely on: every ring visits every rank once with each host's
// ranks together; there is one ring per rail (one in all when fewer than
// two hosts or rails); and, where every host has a rank on every rail, each
// hop is rail-aligned unless the shape forces one across (see aligned),
// and then each host sends one ring's cross-host hop from each rail.
func TestRingsProperties(t *testing.T) {
	dgx := loadHost(t, "dgx-h800.json")
	type shape struct {
		name    string
		w       *topo.World
		rails   int  // the rings wanted
		uniform bool // every host has a rank on every rail
		aligned bool // every hop must be rail-aligned
	}
	var shapes []shape
	for _, hosts := range []int{2, 3, 4, 5} {
		for _, per := range []int{1, 2, 3, 4, 8} {
			for _, rails := range []int{1, 2, 4} {
				var hs []*topo.Host
				for i := range hosts {
					hs = append(hs, cpuHost(fmt.Sprintf("host%d", i), rails))
				}
				uniform := per >= rails
				shapes = append(shapes, shape{
					name: fmt.Sprintf("cpu %dx%dx%d", hosts, per, rails), w: world(t, per, hs...),
					rails:   min(rails, per),
					uniform: uniform,
					// Ring c enters host 0 on rail (c+hosts-1) mod R and
					// leaves it on rail c: the same rail when hosts mod R
					// is 1, which takes two ranks on every rail.
					aligned: uniform && (hosts%rails != 1 || per >= 2*rails),
				})
			}
		}
	}
	for _, n := range []int{2, 3} {
		shapes = append(shapes, shape{name: fmt.Sprintf("dgx-h800 x%d", n), w: world(t, 0, copies(dgx, n)...), rails: 8, uniform: true, aligned: true})
	}
	shapes = append(shapes, shape{name: "dgx-h800 missing a NIC", w: world(t, 0, rename(dgx, "a"), dropNIC(t, rename(dgx, "b"), "mlx5_3")), rails: 8})
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			w := sh.w
			rings := Rings(w)
			want := sh.rails
			hostSet := map[string]bool{}
			for r := range w.Size() {
				hostSet[w.Member(r).Host.Hostname] = true
			}
			if len(hostSet) < 2 || want < 2 {
				want = 1
			}
			if len(rings) != want {
				t.Fatalf("%d rings, want %d: %v", len(rings), want, rings)
			}
			sent := map[string]map[int]int{} // host -> rail -> hops sent
			for c, ring := range rings {
				checkRing(t, w, c, ring)
				hops := RingHops(w, ring)
				if len(hostSet) > 1 && len(hops) != len(hostSet) {
					t.Errorf("ring %d %v: %d cross-host hops, want one per host (%d)", c, ring, len(hops), len(hostSet))
				}
				for _, h := range hops {
					if sh.aligned && !h.Aligned {
						t.Errorf("ring %d %v: hop %d→%d crosses from rail %d to rail %d", c, ring, h.Src, h.Dst, h.Rail, h.DstRail)
					}
					name := w.Member(h.Src).Host.Hostname
					if sent[name] == nil {
						sent[name] = map[int]int{}
					}
					sent[name][h.Rail]++
				}
			}
			if !sh.aligned || want < 2 {
				return
			}
			for h, by := range sent {
				for r := range want {
					if by[r] != 1 {
						t.Errorf("host %s sends %d ring hops from rail %d over %d rings, want 1 each: %v", h, by[r], r, want, by)
					}
				}
			}
		})
	}
}

// checkRing asserts that ring is an order of every rank with each host's
// ranks contiguous.
func checkRing(t *testing.T, w *topo.World, c int, ring []int) {
	t.Helper()
	if len(ring) != w.Size() {
		t.Fatalf("ring %d has %d ranks, want %d", c, len(ring), w.Size())
	}
	sorted := slices.Sorted(slices.Values(ring))
	for i, r := range sorted {
		if r != i {
			t.Fatalf("ring %d %v is not an order of 0..%d", c, ring, w.Size()-1)
		}
	}
	done := map[string]bool{}
	for i, r := range ring {
		h := w.Member(r).Host.Hostname
		if i > 0 && w.Member(ring[i-1]).Host.Hostname != h {
			if done[h] {
				t.Fatalf("ring %d %v visits host %s twice", c, ring, h)
			}
		}
		done[h] = true
	}
}
