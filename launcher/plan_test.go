package launcher

import (
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

func pl(rank int, host string, node, local, size, gpu int) Placement {
	return Placement{Rank: rank, Host: host, NodeRank: node, LocalRank: local, LocalSize: size, GPU: gpu}
}

func TestPlan(t *testing.T) {
	a2g := Host{Name: "a", Slots: 2, GPUs: 2}
	b2 := Host{Name: "b", Slots: 2}
	tests := []struct {
		name    string
		req     PlanRequest
		want    []Placement
		wantErr string
	}{
		{"np defaults to all slots", PlanRequest{Hosts: []Host{a2g, b2}},
			[]Placement{pl(0, "a", 0, 0, 2, 0), pl(1, "a", 0, 1, 2, 1), pl(2, "b", 1, 0, 2, -1), pl(3, "b", 1, 1, 2, -1)}, ""},
		{"by slot fills the first host", PlanRequest{Hosts: []Host{a2g, b2}, NP: 3, MapBy: MapBySlot},
			[]Placement{pl(0, "a", 0, 0, 2, 0), pl(1, "a", 0, 1, 2, 1), pl(2, "b", 1, 0, 1, -1)}, ""},
		{"unused host is no node", PlanRequest{Hosts: []Host{a2g, b2}, NP: 2},
			[]Placement{pl(0, "a", 0, 0, 2, 0), pl(1, "a", 0, 1, 2, 1)}, ""},
		{"by node deals round-robin", PlanRequest{Hosts: []Host{a2g, b2}, NP: 4, MapBy: MapByNode},
			[]Placement{pl(0, "a", 0, 0, 2, 0), pl(1, "b", 1, 0, 2, -1), pl(2, "a", 0, 1, 2, 1), pl(3, "b", 1, 1, 2, -1)}, ""},
		{"by node skips full hosts", PlanRequest{Hosts: []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 3}}, MapBy: MapByNode},
			[]Placement{pl(0, "a", 0, 0, 1, -1), pl(1, "b", 1, 0, 3, -1), pl(2, "b", 1, 1, 3, -1), pl(3, "b", 1, 2, 3, -1)}, ""},
		{"GPU is local rank mod GPUs", PlanRequest{Hosts: []Host{{Name: "g", Slots: 5, GPUs: 2}}},
			[]Placement{pl(0, "g", 0, 0, 5, 0), pl(1, "g", 0, 1, 5, 1), pl(2, "g", 0, 2, 5, 0), pl(3, "g", 0, 3, 5, 1), pl(4, "g", 0, 4, 5, 0)}, ""},
		{"oversubscribed by slot: extras round-robin, ranks consecutive",
			PlanRequest{Hosts: []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}}, NP: 5, Oversubscribe: true},
			[]Placement{pl(0, "a", 0, 0, 3, -1), pl(1, "a", 0, 1, 3, -1), pl(2, "a", 0, 2, 3, -1), pl(3, "b", 1, 0, 2, -1), pl(4, "b", 1, 1, 2, -1)}, ""},
		{"oversubscribed by node", PlanRequest{Hosts: []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}}, NP: 3, MapBy: MapByNode, Oversubscribe: true},
			[]Placement{pl(0, "a", 0, 0, 2, -1), pl(1, "b", 1, 0, 1, -1), pl(2, "a", 0, 1, 2, -1)}, ""},
		{"max_slots caps oversubscription",
			PlanRequest{Hosts: []Host{{Name: "a", Slots: 1, MaxSlots: 2}, {Name: "b", Slots: 1}}, NP: 5, Oversubscribe: true},
			[]Placement{pl(0, "a", 0, 0, 2, -1), pl(1, "a", 0, 1, 2, -1), pl(2, "b", 1, 0, 3, -1), pl(3, "b", 1, 1, 3, -1), pl(4, "b", 1, 2, 3, -1)}, ""},
		{"more ranks than slots", PlanRequest{Hosts: []Host{a2g, b2}, NP: 5}, nil,
			"5 ranks requested but only 4 slots available on a (2), b (2); use --oversubscribe"},
		{"max_slots reached by slot", PlanRequest{Hosts: []Host{{Name: "a", Slots: 1, MaxSlots: 1}}, NP: 2, Oversubscribe: true}, nil, "max_slots reached"},
		{"max_slots reached by node", PlanRequest{Hosts: []Host{{Name: "a", Slots: 1, MaxSlots: 2}}, NP: 3, MapBy: MapByNode, Oversubscribe: true}, nil, "max_slots reached"},
		{"max below slots", PlanRequest{Hosts: []Host{{Name: "a", Slots: 2, MaxSlots: 1}}}, nil, "below slots"},
		{"no hosts", PlanRequest{NP: 1}, nil, "no hosts"},
		{"negative np", PlanRequest{Hosts: []Host{b2}, NP: -1}, nil, "must be positive"},
		{"zero slots", PlanRequest{Hosts: []Host{{Name: "z"}}}, nil, "host z has 0 slots"},
		{"unknown map-by", PlanRequest{Hosts: []Host{b2}, MapBy: "socket"}, nil, "unknown map-by"},
		{"per node: np defaults to N per host", PlanRequest{Hosts: []Host{a2g, b2}, PerNode: 1},
			[]Placement{pl(0, "a", 0, 0, 1, 0), pl(1, "b", 1, 0, 1, -1)}, ""},
		{"per node by node", PlanRequest{Hosts: []Host{a2g, b2}, PerNode: 2, MapBy: MapByNode},
			[]Placement{pl(0, "a", 0, 0, 2, 0), pl(1, "b", 1, 0, 2, -1), pl(2, "a", 0, 1, 2, 1), pl(3, "b", 1, 1, 2, -1)}, ""},
		{"per node with fewer np", PlanRequest{Hosts: []Host{a2g, b2}, PerNode: 2, NP: 3},
			[]Placement{pl(0, "a", 0, 0, 2, 0), pl(1, "a", 0, 1, 2, 1), pl(2, "b", 1, 0, 1, -1)}, ""},
		{"per node above slots", PlanRequest{Hosts: []Host{a2g, b2}, PerNode: 3}, nil, "3 ranks per node but host a has 2 slots; use --oversubscribe"},
		{"per node oversubscribed", PlanRequest{Hosts: []Host{{Name: "a", Slots: 1}}, PerNode: 3, Oversubscribe: true},
			[]Placement{pl(0, "a", 0, 0, 3, -1), pl(1, "a", 0, 1, 3, -1), pl(2, "a", 0, 2, 3, -1)}, ""},
		{"per node: np too large", PlanRequest{Hosts: []Host{a2g, b2}, PerNode: 1, NP: 3}, nil, "-np 3 is more than 1 ranks per node on 2 hosts (2)"},
		{"per node: max_slots", PlanRequest{Hosts: []Host{{Name: "a", Slots: 1, MaxSlots: 2}}, PerNode: 3, Oversubscribe: true}, nil, "max_slots=2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Plan(tc.req)
			testenv.WantResult(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestParseMapBy(t *testing.T) {
	tests := []struct {
		in   string
		want MapBy
		ok   bool
	}{{"", MapBySlot, true}, {"slot", MapBySlot, true}, {"NODE", MapByNode, true}, {"socket", "", false}}
	for _, tc := range tests {
		got, err := ParseMapBy(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseMapBy(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestParseMapping(t *testing.T) {
	tests := []struct {
		in      string
		want    Mapping
		wantErr string
	}{
		{"", Mapping{By: MapBySlot}, ""},
		{"node", Mapping{By: MapByNode}, ""},
		{"ppr:4:node", Mapping{MapBySlot, 4, PerHost}, ""},
		{"PPR:1:NODE", Mapping{MapBySlot, 1, PerHost}, ""},
		{"ppr:2:numa", Mapping{MapBySlot, 2, PerNUMA}, ""},
		{"ppr:1:numanode", Mapping{MapBySlot, 1, PerNUMA}, ""},
		{"ppr:3:socket", Mapping{MapBySlot, 3, PerSocket}, ""},
		{"ppr:1:package", Mapping{MapBySlot, 1, PerSocket}, ""},
		{"ppr:0:node", Mapping{}, "want ppr:N:node, ppr:N:numa or ppr:N:socket with N of 1 or more"},
		{"ppr:2:core", Mapping{}, `ranks per "core" are not supported`},
		{"ppr:2:socket:pe=2", Mapping{}, `ranks per "socket:pe=2" are not supported`},
		{"ppr:x:node", Mapping{}, "with N of 1 or more"},
		{"socket", Mapping{}, "want slot, node, ppr:N:node, ppr:N:numa or ppr:N:socket"},
	}
	for _, tc := range tests {
		m, err := ParseMapping(tc.in)
		testenv.WantErr(t, err, tc.wantErr)
		if m != tc.want {
			t.Errorf("ParseMapping(%q) = %+v, want %+v", tc.in, m, tc.want)
		}
	}
}
