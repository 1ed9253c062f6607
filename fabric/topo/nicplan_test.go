package topo

import (
	"flag"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// part is one PCIe switch (or, with sw == "", the root port level of a
// host bridge) of a synthetic host: the GPUs and NICs below it.
type part struct {
	root, sw   string
	numa       int
	gpus, nics int
}

// layout builds a host from parts: GPUs and NICs are numbered in part
// order (GPU0.., mlx5_0..), bus ids rising in the same order; every NIC
// is an RDMA NIC; rails as Load assigns them.
func layout(t *testing.T, name string, parts ...part) *Host {
	t.Helper()
	h := &Host{Hostname: name, GPUs: []GPU{}, NICs: []NIC{}}
	bus := 0
	next := func() string { bus++; return fmt.Sprintf("0000:%02x:00.0", bus) }
	for _, p := range parts {
		pos := PCIPos{Root: p.root}
		if p.sw != "" {
			pos.Switches = []string{p.sw}
		}
		for range p.gpus {
			h.GPUs = append(h.GPUs, GPU{Index: len(h.GPUs), BusID: next(), NUMANode: p.numa, PCI: pos})
		}
		for range p.nics {
			h.NICs = append(h.NICs, NIC{Name: fmt.Sprintf("mlx5_%d", len(h.NICs)), RDMA: true, BusID: next(), NUMANode: p.numa, PCI: pos, Speed: 200e9})
		}
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := AssignRails(h, nil); err != nil {
		t.Fatal(err)
	}
	return h
}

// perSwitch is a host of sws switches, gpus GPUs and nics NICs under
// each, the first half of the switches on NUMA node 0, each switch under
// its own host bridge.
func perSwitch(t *testing.T, name string, sws, gpus, nics int) *Host {
	var ps []part
	for s := range sws {
		ps = append(ps, part{root: fmt.Sprintf("pci%d", s), sw: fmt.Sprintf("sw%d", s), numa: s * 2 / sws, gpus: gpus, nics: nics})
	}
	return layout(t, name, ps...)
}

// dropNIC removes a NIC from a host built by layout and assigns rails
// again, as detection on a host that lost one would.
func dropNIC(t *testing.T, h *Host, name string) *Host {
	t.Helper()
	i := nicByName(h, name)
	if i < 0 {
		t.Fatalf("no NIC %s", name)
	}
	h.NICs = append(h.NICs[:i], h.NICs[i+1:]...)
	if err := AssignRails(h, nil); err != nil {
		t.Fatal(err)
	}
	return h
}

type nicCase struct {
	name string
	host func(t *testing.T) *Host
	// want is every GPU's NICs by name, worked out by hand from the
	// layout (own NIC first).
	want [][]string
}

func nicCases() []nicCase {
	return []nicCase{
		{"2gpu-2nic-per-switch", func(t *testing.T) *Host { return perSwitch(t, "a100", 4, 2, 2) },
			names("0", "1", "2", "3", "4", "5", "6", "7")},
		{"1gpu-1nic-per-switch", func(t *testing.T) *Host { return perSwitch(t, "h100", 8, 1, 1) },
			names("0", "1", "2", "3", "4", "5", "6", "7")},
		{"2gpu-1nic-per-switch", func(t *testing.T) *Host { return perSwitch(t, "dgx1", 4, 2, 1) },
			names("0", "0", "1", "1", "2", "2", "3", "3")},
		{"1gpu-2nic-per-switch", func(t *testing.T) *Host { return perSwitch(t, "twonic", 4, 1, 2) },
			names("0,1", "2,3", "4,5", "6,7")},
		// 4 GPUs under their own switches per socket, 2 NICs on each
		// socket's host bridge (no switch): PHB, 2 GPUs per NIC.
		{"nics-on-host-bridge", func(t *testing.T) *Host {
			var ps []part
			for s := range 2 {
				root := fmt.Sprintf("pci%d", s)
				for g := range 4 {
					ps = append(ps, part{root: root, sw: fmt.Sprintf("sw%d%d", s, g), numa: s, gpus: 1})
				}
				ps = append(ps, part{root: root, numa: s, nics: 2})
			}
			return layout(t, "bridge", ps...)
		}, names("0", "1", "0", "1", "2", "3", "2", "3")},
		// the DGX A100 layout without mlx5_3: GPU2 and GPU3 share mlx5_2,
		// the only NIC left under their switch.
		{"missing-nic", func(t *testing.T) *Host { return dropNIC(t, perSwitch(t, "a100-less", 4, 2, 2), "mlx5_3") },
			names("0", "1", "2", "2", "4", "5", "6", "7")},
		// 4-GPU hosts: 2 switches of 2 GPUs and 2 NICs; 2 switches of 2
		// GPUs and 1 NIC.
		{"4gpu-2nic-per-switch", func(t *testing.T) *Host { return perSwitch(t, "four", 2, 2, 2) },
			names("0", "1", "2", "3")},
		{"4gpu-1nic-per-switch", func(t *testing.T) *Host { return perSwitch(t, "four-half", 2, 2, 1) },
			names("0", "0", "1", "1")},
		// GPU0 and GPU1 share a switch with one NIC; GPU2 has a switch of
		// its own without NIC, beside a bare NIC on the same host bridge:
		// GPU2 takes mlx5_1 (PHB), the NIC no PIX GPU holds.
		{"uneven-distances", func(t *testing.T) *Host {
			return layout(t, "uneven", part{root: "r", sw: "s0", gpus: 2, nics: 1}, part{root: "r", sw: "s1", gpus: 1}, part{root: "r", nics: 1})
		}, names("0", "0", "1")},
		// no PCI positions (a hand-written file): GPUs are dealt the NICs
		// in turn.
		{"unknown-distances", func(t *testing.T) *Host {
			return layout(t, "flat", part{gpus: 4}, part{nics: 2})
		}, names("0", "1", "0", "1")},
	}
}

// names turns "0,1" into []string{"mlx5_0", "mlx5_1"}, one argument per
// GPU.
func names(per ...string) [][]string {
	out := make([][]string, len(per))
	for i, p := range per {
		for _, n := range strings.Split(p, ",") {
			out[i] = append(out[i], "mlx5_"+n)
		}
	}
	return out
}

// nicTable is the golden form of a host's assignment: one line per GPU
// (its NICs with distance and rail), then one per NIC (its GPUs).
func nicTable(h *Host, a [][]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "host %s: %d GPUs, %d NICs\n", h.Hostname, len(h.GPUs), len(h.NICs))
	users := map[int][]string{}
	for i, nics := range a {
		var parts []string
		for _, n := range nics {
			parts = append(parts, fmt.Sprintf("%s %s rail %d", h.NICs[n].Name, h.NICDistance(i, n), h.NICs[n].Rail))
			users[n] = append(users[n], fmt.Sprintf("GPU%d", h.GPUs[i].Index))
		}
		fmt.Fprintf(&b, "GPU%d  %s\n", h.GPUs[i].Index, strings.Join(parts, ", "))
	}
	for n, c := range h.NICs {
		u := strings.Join(users[n], " ")
		if u == "" {
			u = "-"
		}
		fmt.Fprintf(&b, "%s rail %d: %s\n", c.Name, c.Rail, u)
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	testenv.Golden(t, filepath.Join("testdata", "nics", name+".txt"), []byte(got), *update)
}

func TestAssignNICsGolden(t *testing.T) {
	for _, c := range nicCases() {
		t.Run(c.name, func(t *testing.T) {
			h := c.host(t)
			a := h.GPUNICs()
			got := make([][]string, len(a))
			for i, nics := range a {
				for _, n := range nics {
					got[i] = append(got[i], h.NICs[n].Name)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("GPU NICs %v, want %v", got, c.want)
			}
			checkSpread(t, h, a)
			if again := h.GPUNICs(); !reflect.DeepEqual(again, a) {
				t.Errorf("two runs differ: %v, %v", a, again)
			}
			golden(t, c.name, nicTable(h, a))
		})
	}
}

// checkSpread asserts the rules against a brute-force reference: a GPU's
// NICs are all at its best distance; GPUs with the same nearest NICs use
// them evenly (counts differ by at most one) and distinctly where there
// are at least as many NICs; every NIC nearest some GPU is used.
func checkSpread(t *testing.T, h *Host, a [][]int) {
	t.Helper()
	nearest := func(i int) []int { // brute force, no ordering tricks
		best := DistUnknown
		for n := range h.NICs {
			if d := h.NICDistance(i, n); d != DistUnknown && (best == DistUnknown || d < best) {
				best = d
			}
		}
		var out []int
		for n := range h.NICs {
			if best == DistUnknown || h.NICDistance(i, n) == best {
				out = append(out, n)
			}
		}
		return out
	}
	groups := map[string][]int{}
	used := map[int]bool{}
	for i := range h.GPUs {
		near := nearest(i)
		if len(a[i]) == 0 {
			t.Errorf("GPU%d has no NIC", h.GPUs[i].Index)
			continue
		}
		for _, n := range a[i] {
			if !contains(near, n) {
				t.Errorf("GPU%d uses %s, not one of its nearest %v", h.GPUs[i].Index, h.NICs[n].Name, near)
			}
			used[n] = true
		}
		key := fmt.Sprint(near)
		groups[key] = append(groups[key], i)
	}
	for _, gpus := range groups {
		count := map[int]int{}
		near := nearest(gpus[0])
		for _, i := range gpus {
			count[a[i][0]]++
		}
		lo, hi := len(gpus), 0
		for _, n := range near {
			lo, hi = min(lo, count[n]), max(hi, count[n])
		}
		if hi-lo > 1 {
			t.Errorf("GPUs %v over NICs %v: own-NIC counts %v are uneven", gpus, near, count)
		}
		if len(gpus) <= len(near) && hi > 1 {
			t.Errorf("GPUs %v share a NIC with %d NICs nearest them: %v", gpus, len(near), count)
		}
		for _, n := range near {
			if !used[n] {
				t.Errorf("%s is nearest GPUs %v but unused", h.NICs[n].Name, gpus)
			}
		}
	}
}

// TestRailsFollowGPUs: where every GPU has its own NIC, GPU i's NIC is on
// rail i; where two GPUs share one, the shared NICs are rails 0, 1, ...
// in GPU order.
func TestRailsFollowGPUs(t *testing.T) {
	for _, c := range nicCases()[:4] {
		h := c.host(t)
		rail := 0
		for i, nics := range h.GPUNICs() {
			for _, n := range nics {
				if i > 0 && contains(h.GPUNICs()[i-1], n) {
					continue
				}
				if h.NICs[n].Rail != rail {
					t.Errorf("%s: GPU%d's %s is on rail %d, want %d", c.name, i, h.NICs[n].Name, h.NICs[n].Rail, rail)
				}
				rail++
			}
		}
	}
}

// TestWorldMixedHosts: a job of a DGX A100-like host (2 GPUs and 2 NICs
// per switch) and a 4-GPU host (2 GPUs and 1 NIC per switch). Every rank
// sends from its own NIC; a net link between ranks whose NICs are on
// different rails takes the lower rank's rail where the other host has
// it.
func TestWorldMixedHosts(t *testing.T) {
	a := perSwitch(t, "big", 4, 2, 2)
	b := perSwitch(t, "small", 2, 2, 1)
	var m []Member
	for _, h := range []*Host{a, b} {
		for _, g := range h.GPUs {
			m = append(m, Member{Host: h, GPU: g.Index})
		}
	}
	w, err := NewWorld(m)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	wantOwn := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"}
	for r := range w.Size() {
		h := w.Member(r).Host
		own := w.RankNICs(r)
		if len(own) == 0 || h.NICs[own[0]].Name != wantOwn[r] {
			t.Errorf("rank %d's NICs %v, want %s first", r, own, wantOwn[r])
		}
		fmt.Fprintf(&out, "rank %d %s GPU%d: %s rail %d\n", r, h.Hostname, w.Member(r).GPU, h.NICs[own[0]].Name, h.NICs[own[0]].Rail)
	}
	for x := range 8 {
		for y := 8; y < 12; y++ {
			l := w.Links(x, y)[0]
			back := w.Links(y, x)[0]
			if back.NICs != [2]string{l.NICs[1], l.NICs[0]} || back.Rail != l.Rail {
				t.Errorf("Links(%d,%d) %v and Links(%d,%d) %v disagree", x, y, l.NICs, y, x, back.NICs)
			}
			// rank x (lower) keeps its own NIC; rank y moves to x's rail
			// when its host has it (the small host has rails 0 and 1).
			ownX := a.NICs[w.RankNICs(x)[0]]
			if l.NICs[0] != ownX.Name {
				t.Errorf("Links(%d,%d) sends from %s, not rank %d's own %s", x, y, l.NICs[0], x, ownX.Name)
			}
			if ownX.Rail < 2 && l.Rail != ownX.Rail {
				t.Errorf("Links(%d,%d) on rail %d, want rank %d's rail %d", x, y, l.Rail, x, ownX.Rail)
			}
			fmt.Fprintf(&out, "%d-%d: %s\n", x, y, l.Desc)
		}
	}
	golden(t, "mixed-hosts", out.String())
}
