package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/proxy/pxn"
)

// planFor computes, without the command, the plan flexinfo routes should
// print: n copies of a fixture, one rank per GPU, host by host.
func planFor(t *testing.T, fixture string, n int, opt pxn.Options) *pxn.Plan {
	t.Helper()
	h := mustLoad(t, fixture)
	var m []topo.Member
	for i := range n {
		c := *h
		c.Hostname = fmt.Sprintf("host%d", i)
		for _, g := range h.GPUs {
			m = append(m, topo.Member{Host: &c, GPU: g.Index})
		}
	}
	w, err := topo.NewWorld(m)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pxn.Compute(w, opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decodeLines parses JSON Lines strictly: every line one object of T.
func decodeLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var got []T
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var v T
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, v)
	}
	return got
}

func TestRoutesJSON(t *testing.T) {
	for _, c := range []struct {
		fixture string
		nodes   int
		args    []string
		opt     pxn.Options
	}{
		{"dgx-h800.json", 2, nil, pxn.Options{Level: pxn.Rail}},
		{"dgx-h800.json", 4, []string{"--level", "0"}, pxn.Options{Level: pxn.Off}},
		{"dgx1.json", 3, []string{"--level", "2"}, pxn.Options{Level: pxn.Rail}},
		{"dgx1.json", 2, []string{"--host-buffers", "--level", "1"}, pxn.Options{Level: pxn.FarNIC, Mem: pxn.HostMem}},
	} {
		name := fmt.Sprintf("%s-x%d-%s", c.fixture, c.nodes, strings.Join(c.args, ""))
		t.Run(name, func(t *testing.T) {
			args := append([]string{"routes", "--topo-file", fixturePath(c.fixture), "--nodes", fmt.Sprint(c.nodes), "--json"}, c.args...)
			out, err := run(t, nil, args...)
			if err != nil {
				t.Fatal(err)
			}
			want := planFor(t, c.fixture, c.nodes, c.opt)
			if got := decodeLines[pxn.Route](t, out); !reflect.DeepEqual(got, want.Routes) {
				t.Errorf("routes differ from the planner's: %d lines, want %d", len(got), len(want.Routes))
			}
			out, err = run(t, nil, append(args, "--groups")...)
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeLines[pxn.Group](t, out); !reflect.DeepEqual(got, want.Aggregate(0).Groups) {
				t.Errorf("groups differ from the planner's aggregation")
			}
		})
	}
}

// TestRoutesTable: the table lists every route and ends with the
// aggregation counts.
func TestRoutesTable(t *testing.T) {
	out, err := run(t, nil, "routes", "--topo-file", fixturePath("dgx-h800.json"), "--nodes", "2")
	if err != nil {
		t.Fatal(err)
	}
	p := planFor(t, "dgx-h800.json", 2, pxn.Options{Level: pxn.Rail})
	a := p.Aggregate(0)
	rows := strings.Count(out, "\nhost0:") + strings.Count(out, "\nhost1:")
	want := fmt.Sprintf("all-to-all: %d cross-host messages, %d relayed, %d cross-rail; %d receives", a.Messages, a.Relayed, a.CrossRail, a.Receives)
	if rows != len(p.Routes) || !strings.Contains(out, want) {
		t.Errorf("%d route rows (want %d), summary %q missing:\n%s", rows, len(p.Routes), want, out)
	}
	golden(t, "routes-dgx-h800x2.txt", out)
}

// TestRoutesCPUHosts: a host without GPUs needs --ranks-per-node and
// plans host buffers.
func TestRoutesCPUHosts(t *testing.T) {
	if _, err := run(t, nil, "routes", "--topo-file", fixturePath("nogpu.yaml"), "--nodes", "2"); err == nil || !strings.Contains(err.Error(), "no GPUs") {
		t.Errorf("no --ranks-per-node on a host without GPUs: error %v", err)
	}
	out, err := run(t, nil, "routes", "--topo-file", fixturePath("nogpu.yaml"), "--nodes", "2", "--ranks-per-node", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	got := decodeLines[pxn.Route](t, out)
	if len(got) != 2*3*3 {
		t.Fatalf("%d routes, want 18", len(got))
	}
	for _, r := range got {
		if r.Relayed() || !strings.Contains(r.Reason, "has no rails") {
			t.Errorf("%+v: want direct, no rails (the host's only NIC is not RDMA)", r)
		}
	}
}

func TestRoutesErrors(t *testing.T) {
	base := []string{"routes", "--topo-file", fixturePath("dgx-h800.json")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "0"}, "--nodes 0"},
		{[]string{"--nodes", "1"}, "--nodes 1"},
		{[]string{"--nodes", "-3"}, "--nodes -3"},
		{[]string{"--nodes", "1000"}, "--nodes 1000"},
		{[]string{"--nodes", "two"}, "invalid value"},
		{[]string{"--nodes", "2", "--level", "3"}, "level"},
		{[]string{"--nodes", "2", "--ranks-per-node", "9"}, "has 8 GPUs"},
		{[]string{"--nodes", "2", "--max-recvs", "0"}, "--max-recvs 0"},
		{[]string{"--nodes", "2", "stray"}, "unexpected argument"},
		{[]string{}, "nodes"},
	} {
		_, err := run(t, nil, append(base, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("routes %q: error %v, want one with %q", c.args, err, c.want)
		}
	}
	if _, err := run(t, nil, "routes", "--topo-file", "no-such-file.json", "--nodes", "2"); err == nil {
		t.Error("routes with a missing topology file: no error")
	}
}

// TestRoutesEveryNIC: on a host whose PCIe switches each hold two GPUs
// and two NICs (DGX A100), the routes of two such hosts use all 8 NICs of
// each host, each GPU sends from a NIC of its own (no two relays of a
// host share one), and every route stays on its destination's rail.
func TestRoutesEveryNIC(t *testing.T) {
	out, err := run(t, nil, "routes", "--topo-file", fixturePath("dgx-a100.json"), "--nodes", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	routes := decodeLines[pxn.Route](t, out)
	if len(routes) != 2*8*8 {
		t.Fatalf("%d routes, want 128 (every cross-host pair of 16 ranks)", len(routes))
	}
	h := mustLoad(t, "dgx-a100.json")
	var all []string
	for _, n := range h.NICs {
		if n.RDMA {
			all = append(all, n.Name)
		}
	}
	nicOf := map[int]string{}  // sending rank -> its NIC
	rankOf := map[string]int{} // host/NIC -> the rank sending from it
	used := map[int]map[string]bool{0: {}, 1: {}}
	for _, r := range routes {
		if !r.Aligned() {
			t.Errorf("route %+v is not rail-aligned", r)
		}
		if prev, ok := nicOf[r.Via]; ok && prev != r.NIC {
			t.Errorf("rank %d sends from %s and from %s", r.Via, prev, r.NIC)
		}
		nicOf[r.Via] = r.NIC
		key := fmt.Sprintf("%d/%s", r.Via/8, r.NIC)
		if prev, ok := rankOf[key]; ok && prev != r.Via {
			t.Errorf("host%d's %s is used by ranks %d and %d", r.Via/8, r.NIC, prev, r.Via)
		}
		rankOf[key] = r.Via
		used[r.Via/8][r.NIC] = true
		// the GPU's own NIC sits under its PCIe switch (PIX)
		if g, n := r.Via%8, nicIndex(h, r.NIC); n < 0 || h.NICDistance(g, n) != topo.PIX {
			t.Errorf("rank %d (GPU%d) sends from %s, not a NIC under its switch", r.Via, g, r.NIC)
		}
	}
	for host, nics := range used {
		if len(nics) != len(all) || len(all) != 8 {
			t.Errorf("host%d uses %d NICs %v, want all %d: %v", host, len(nics), nics, len(all), all)
		}
	}
}

func nicIndex(h *topo.Host, name string) int {
	for i, n := range h.NICs {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// TestRoutesRings: --json --rings prints pxn.Rings' rings of the job, one
// per line with its cross-host hops; on copies of a host whose GPUs each
// own a NIC, one ring per rail, every hop rail-aligned, and each host
// sending one hop from each rail.
func TestRoutesRings(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		nodes   int
	}{{"dgx-h800.json", 2}, {"dgx-h800.json", 3}, {"dgx-a100.json", 2}} {
		out, err := run(t, nil, "routes", "--topo-file", fixturePath(tc.fixture), "--nodes", fmt.Sprint(tc.nodes), "--json", "--rings")
		if err != nil {
			t.Fatal(err)
		}
		got := decodeLines[ringLine](t, out)
		h := mustLoad(t, tc.fixture)
		rails := len(topo.RailNICs(h))
		if len(got) != rails {
			t.Errorf("%s x%d: %d rings, want one per rail (%d)", tc.fixture, tc.nodes, len(got), rails)
		}
		sent := map[[2]int]int{} // (host, rail) -> hops
		for c, r := range got {
			if r.Ring != c || len(r.Ranks) != tc.nodes*len(h.GPUs) || len(r.Hops) != tc.nodes {
				t.Errorf("%s x%d: ring line %+v", tc.fixture, tc.nodes, r)
			}
			for _, hop := range r.Hops {
				if !hop.Aligned || hop.Rail != hop.DstRail {
					t.Errorf("%s x%d: ring %d hop %+v is not rail-aligned", tc.fixture, tc.nodes, c, hop)
				}
				sent[[2]int{hop.Src / len(h.GPUs), hop.Rail}]++
			}
		}
		for k, v := range sent {
			if v != 1 {
				t.Errorf("%s x%d: host %d sends %d ring hops on rail %d, want 1", tc.fixture, tc.nodes, k[0], v, k[1])
			}
		}
		if len(sent) != tc.nodes*rails {
			t.Errorf("%s x%d: hops from %d (host, rail) pairs, want %d", tc.fixture, tc.nodes, len(sent), tc.nodes*rails)
		}
	}
}
