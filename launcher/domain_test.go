package launcher

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

// pprReference places ranks per NUMA node or socket the way OpenMPI's
// ppr mapper documents it, written independently of Plan: by slot, walk
// the hosts, in each its units, in each take perUnit ranks; by node, deal
// one rank at a time to each host in turn, each host filling its units in
// order. It returns, per rank, "host/unit/rank-in-unit".
func pprReference(hosts []Host, unit Domain, perUnit, np int, byNode bool) []string {
	type slot struct {
		host string
		unit int
	}
	var perHost [][]slot
	for _, h := range hosts {
		n := h.NUMANodes
		if unit == PerSocket {
			n = h.Sockets
		}
		var s []slot
		for u := range n {
			for range perUnit {
				s = append(s, slot{h.Name, u})
			}
		}
		perHost = append(perHost, s)
	}
	var order []slot
	longest := 0
	for _, s := range perHost {
		longest = max(longest, len(s))
	}
	if byNode {
		for i := 0; i < longest && len(order) < np; i++ {
			for _, s := range perHost {
				if i < len(s) && len(order) < np {
					order = append(order, s[i])
				}
			}
		}
	} else {
		for _, s := range perHost {
			for _, x := range s {
				if len(order) < np {
					order = append(order, x)
				}
			}
		}
	}
	seen := map[slot]int{}
	out := make([]string, len(order))
	for r, s := range order {
		out[r] = fmt.Sprintf("%s/%d/%d", s.host, s.unit, seen[s])
		seen[s]++
	}
	return out
}

func TestPlanPerDomain(t *testing.T) {
	two := []Host{{Name: "a", Slots: 8, NUMANodes: 2, Sockets: 1}, {Name: "b", Slots: 8, NUMANodes: 2, Sockets: 1}}
	uneven := []Host{{Name: "a", Slots: 8, NUMANodes: 4, Sockets: 2}, {Name: "b", Slots: 8, NUMANodes: 1, Sockets: 1}}
	tests := []struct {
		name    string
		hosts   []Host
		unit    Domain
		perUnit int
		np      int // 0: all
		byNode  bool
		wantNP  int
	}{
		{"1 per numa, 2 hosts", two, PerNUMA, 1, 0, false, 4},
		{"2 per numa, 2 hosts", two, PerNUMA, 2, 0, false, 8},
		{"2 per numa, np 5", two, PerNUMA, 2, 5, false, 5},
		{"2 per numa by node", two, PerNUMA, 2, 0, true, 8},
		{"1 per numa, uneven hosts", uneven, PerNUMA, 1, 0, false, 5},
		{"1 per numa, uneven by node", uneven, PerNUMA, 1, 0, true, 5},
		{"2 per socket, uneven", uneven, PerSocket, 2, 0, false, 6},
		{"3 per socket, np 4", uneven, PerSocket, 3, 4, false, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := PlanRequest{Hosts: tc.hosts, NP: tc.np, PerNode: tc.perUnit, Unit: tc.unit}
			if tc.byNode {
				req.MapBy = MapByNode
			}
			plan, err := Plan(req)
			if err != nil {
				t.Fatal(err)
			}
			np := tc.np
			if np == 0 {
				np = 1 << 20 // every slot
			}
			want := pprReference(tc.hosts, tc.unit, tc.perUnit, np, tc.byNode)
			if len(plan) != tc.wantNP || len(want) != tc.wantNP {
				t.Fatalf("%d ranks (reference %d), want %d", len(plan), len(want), tc.wantNP)
			}
			size := map[string]int{}
			for _, w := range want {
				size[w[:strings.LastIndexByte(w, '/')]]++
			}
			for r, p := range plan {
				got := fmt.Sprintf("%s/%d/%d", p.Host, p.In.Index, p.In.Rank)
				if got != want[r] || p.Rank != r || p.In.Unit != tc.unit {
					t.Errorf("rank %d: %s (%+v), want %s", r, got, p, want[r])
				}
				if s := size[fmt.Sprintf("%s/%d", p.Host, p.In.Index)]; p.In.Size != s {
					t.Errorf("rank %d: %d ranks in its unit, want %d", r, p.In.Size, s)
				}
			}
		})
	}
}

func TestPlanPerDomainErrors(t *testing.T) {
	tests := []struct {
		name    string
		req     PlanRequest
		wantErr string
	}{
		{"numa count unknown", PlanRequest{Hosts: []Host{{Name: "a", Slots: 4}}, PerNode: 1, Unit: PerNUMA}, "host a: number of numa nodes unknown"},
		{"socket count unknown", PlanRequest{Hosts: []Host{{Name: "a", Slots: 4, NUMANodes: 2}}, PerNode: 1, Unit: PerSocket}, "number of sockets unknown"},
		{"above slots", PlanRequest{Hosts: []Host{{Name: "a", Slots: 3, NUMANodes: 2}}, PerNode: 2, Unit: PerNUMA},
			"2 ranks per numa node (2 numa nodes: 4 ranks) but host a has 3 slots; use --oversubscribe"},
		{"np too large", PlanRequest{Hosts: []Host{{Name: "a", Slots: 8, Sockets: 2}}, NP: 5, PerNode: 2, Unit: PerSocket},
			"-np 5 is more than 2 ranks per socket on 1 hosts (4)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Plan(tc.req)
			testenv.WantErr(t, err, tc.wantErr)
		})
	}
}

func TestBindInDomain(t *testing.T) {
	eight := []int{0, 1, 2, 3, 4, 5, 6, 7}
	// Two sockets of two NUMA nodes each; node ids 0, 1, 4, 5.
	topo := CPUTopology{CPUs: eight, NUMA: [][]int{{0, 1}, {2, 3}, nil, {4, 5}, {6, 7}}, NUMAIDs: []int{0, 1, 2, 4, 5},
		Sockets: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}, SocketIDs: []int{0, 1}, GPUNUMA: []int{5}}
	in := func(unit Domain, idx, rank, size, gpu int) Placement {
		return Placement{Rank: 7, Host: "h", GPU: gpu, In: DomainSlot{Unit: unit, Index: idx, Rank: rank, Size: size}}
	}
	tests := []struct {
		name         string
		mode         BindTo
		p            Placement
		want         []int
		numa, socket int
		wantErr      string
	}{
		{"auto: the planned numa node (skips the empty one)", BindAuto, in(PerNUMA, 2, 0, 1, -1), []int{4, 5}, 4, -1, ""},
		{"auto wins over the GPU's node", BindAuto, in(PerNUMA, 0, 0, 1, 0), []int{0, 1}, 0, -1, ""},
		{"numa: the planned node", BindNUMA, in(PerNUMA, 3, 1, 2, -1), []int{6, 7}, 5, -1, ""},
		{"core: share of the node", BindCore, in(PerNUMA, 1, 1, 2, -1), []int{3}, 1, -1, ""},
		{"gpu: the GPU's node, not the plan's", BindGPU, in(PerNUMA, 0, 0, 1, 0), []int{6, 7}, 5, -1, ""},
		{"none", BindNone, in(PerNUMA, 0, 0, 1, -1), nil, -1, -1, ""},
		{"auto: the planned socket", BindAuto, in(PerSocket, 1, 0, 2, -1), []int{4, 5, 6, 7}, -1, 1, ""},
		{"core: share of the socket", BindCore, in(PerSocket, 1, 1, 3, -1), []int{5}, -1, 1, ""},
		{"core: last share of the socket", BindCore, in(PerSocket, 1, 2, 3, -1), []int{6, 7}, -1, 1, ""},
		{"numa under socket: round-robin", BindNUMA, in(PerSocket, 1, 1, 2, -1), []int{6, 7}, 5, -1, ""},
		{"numa node missing", BindAuto, in(PerNUMA, 4, 0, 1, -1), nil, -1, -1, "planned on numa node #4 but the host has 4 numa nodes with CPUs"},
		{"socket missing", BindAuto, in(PerSocket, 2, 0, 1, -1), nil, -1, -1, "planned on socket #2 but the host has 2 sockets"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Bind(tc.mode, topo, tc.p)
			testenv.WantErr(t, err, tc.wantErr)
			if tc.wantErr != "" {
				return
			}
			if !reflect.DeepEqual(b.CPUs, tc.want) || b.NUMA != tc.numa || b.Socket != tc.socket {
				t.Errorf("got %v numa %d socket %d, want %v numa %d socket %d", b.CPUs, b.NUMA, b.Socket, tc.want, tc.numa, tc.socket)
			}
		})
	}
}

// fakeSys writes a sysfs tree: NUMA node cpulists and each CPU's package.
func fakeSys(t *testing.T, nodes map[int]string, pkg []int) string {
	t.Helper()
	root := t.TempDir()
	for id, cpus := range nodes {
		d := filepath.Join(root, "devices/system/node", fmt.Sprintf("node%d", id))
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "cpulist"), []byte(cpus+"\n"), 0o644))
	}
	for cpu, p := range pkg {
		d := filepath.Join(root, "devices/system/cpu", fmt.Sprintf("cpu%d", cpu), "topology")
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "physical_package_id"), []byte(fmt.Sprintf("%d\n", p)), 0o644))
	}
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCountDomains(t *testing.T) {
	root := fakeSys(t, map[int]string{0: "0-3", 1: "4-7", 2: ""}, []int{0, 0, 0, 0, 1, 1, 1, 1})
	numa, sockets := CountDomains(settings.Map(nil), root)
	if numa != 2 || sockets != 2 {
		t.Errorf("CountDomains = %d numa nodes, %d sockets; want 2, 2 (node2 has no CPUs)", numa, sockets)
	}
	cpus, ids := socketCPUs(root)
	if !reflect.DeepEqual(cpus, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}) || !reflect.DeepEqual(ids, []int{0, 1}) {
		t.Errorf("socketCPUs = %v %v", cpus, ids)
	}
	f := filepath.Join(t.TempDir(), "topo.json")
	must(t, os.WriteFile(f, []byte(`{"hostname":"x","numa":[{"id":0,"cpus":"0-1"},{"id":1,"cpus":"2-3"},{"id":2,"cpus":"4-5"}],"gpus":[],"nics":[]}`), 0o644))
	if numa, _ := CountDomains(settings.Map(map[string]string{"FLEXLINK_TOPO_FILE": f}), root); numa != 3 {
		t.Errorf("CountDomains with a topology file = %d numa nodes, want 3", numa)
	}
}

// TestAgentSpecCarriesBindingAndUnit: the spec an agent gets holds the
// binding mode at its top level and each rank's planned unit.
func TestAgentSpecCarriesBindingAndUnit(t *testing.T) {
	in := agentSpec{agentBinding: agentBinding{BindTo: BindCore, ReportBindings: true},
		Ranks: []Placement{{Rank: 3, Host: "b", In: DomainSlot{Unit: PerNUMA, Index: 1, Rank: 0, Size: 2}}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"bind_to":"core","report_bindings":true`) {
		t.Errorf("spec JSON %s", b)
	}
	var out agentSpec
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.BindTo != BindCore || !out.ReportBindings || !reflect.DeepEqual(out.Ranks, in.Ranks) {
		t.Errorf("round trip: %+v, want %+v", out, in)
	}
	// A plan without units sends no "in".
	if b, _ := json.Marshal(Placement{Rank: 1}); strings.Contains(string(b), `"in"`) {
		t.Errorf("placement JSON %s", b)
	}
}
