package topo

import (
	"reflect"
	"testing"
)

// TestOwnNICsAgreeWithWorld: what a rank computes alone at run time
// (OwnNICs over its host's railed NICs, from its GPU and local index) is
// what the planners' World gives it (RankNICs), for ranks with GPUs on
// DGX-like hosts and for ranks without one; and a member's published NICs
// (Member.NICs) are its NICs in the World, even where two ranks share one.
func TestOwnNICsAgreeWithWorld(t *testing.T) {
	for _, c := range []struct {
		name string
		h    *Host
		gpus bool
	}{
		{"dgx-a100", fixture(t, "dgx-a100.json"), true},
		{"2 GPUs 1 NIC per switch", perSwitch(t, "s", 4, 2, 1), true},
		{"1 GPU 2 NICs per switch", perSwitch(t, "s", 4, 1, 2), true},
		{"dgx-a100 without GPUs", fixture(t, "dgx-a100.json"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m []Member
			for i := range c.h.GPUs {
				g := -1
				if c.gpus {
					g = c.h.GPUs[i].Index
				}
				m = append(m, Member{Host: c.h, GPU: g})
			}
			w, err := NewWorld(m)
			if err != nil {
				t.Fatal(err)
			}
			for r := range m {
				got := OwnNICs(c.h, RailNICs(c.h), m[r].GPU, r)
				if want := w.RankNICs(r); !reflect.DeepEqual(got, want) || len(got) == 0 {
					t.Errorf("rank %d (GPU %d): OwnNICs %v, World.RankNICs %v", r, m[r].GPU, got, want)
				}
			}
		})
	}
	h := fixture(t, "dgx-a100.json")
	m := []Member{{Host: h, GPU: -1, NICs: []int{3}}, {Host: h, GPU: -1, NICs: []int{3}}, {Host: h, GPU: 0}}
	w, err := NewWorld(m)
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range [][]int{{3}, {3}, OwnNICs(h, RailNICs(h), 0, 2)} {
		if got := w.RankNICs(r); !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d: RankNICs %v, want %v (published, or assigned)", r, got, want)
		}
	}
}
