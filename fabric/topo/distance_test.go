package topo

import "testing"

func TestPCIDistance(t *testing.T) {
	sw := func(root string, s ...string) PCIPos { return PCIPos{Root: root, Switches: s} }
	for _, tc := range []struct {
		name         string
		a, b         PCIPos
		numaA, numaB int
		want         Distance
	}{
		{"same switch", sw("r0", "s1"), sw("r0", "s1"), 0, 0, PIX},
		{"sibling switches under one", sw("r0", "s1", "s2"), sw("r0", "s1", "s3"), 0, 0, PXB},
		{"one below the other", sw("r0", "s1", "s2"), sw("r0", "s1"), 0, 0, PXB},
		{"different switches, one root", sw("r0", "s1"), sw("r0", "s2"), 0, 0, PHB},
		{"both on root ports", sw("r0"), sw("r0"), 0, 0, PHB},
		{"two roots, one node", sw("r0", "s1"), sw("r1", "s2"), 1, 1, NODE},
		{"two roots, two nodes", sw("r0"), sw("r1"), 0, 1, SYS},
		{"two roots, node unknown", sw("r0"), sw("r1"), 0, -1, DistUnknown},
		{"position unknown", PCIPos{}, sw("r1"), 0, 0, DistUnknown},
	} {
		if got := PCIDistance(tc.a, tc.b, tc.numaA, tc.numaB); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if got := PCIDistance(tc.b, tc.a, tc.numaB, tc.numaA); got != tc.want {
			t.Errorf("%s (swapped): %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNVLinkCount(t *testing.T) {
	g := func(bus string, links ...NVLink) GPU { return GPU{BusID: bus, NVLinks: links} }
	sw := func(target string, n int) NVLink { return NVLink{Target: target, Remote: RemoteNVSwitch, Count: n} }
	gp := func(target string, n int) NVLink { return NVLink{Target: target, Remote: RemoteGPU, Count: n} }
	for _, tc := range []struct {
		name   string
		a, b   GPU
		want   int
		viaSwi bool
	}{
		{"direct", g("a", gp("b", 2), gp("c", 4)), g("b", gp("a", 2)), 2, false},
		{"uneven switches", g("a", sw("s1", 5), sw("s2", 4)), g("b", sw("s1", 2), sw("s2", 4), sw("s3", 3)), 6, true},
		{"no common switch", g("a", sw("s1", 6)), g("b", sw("s2", 6)), 0, false},
		{"direct and switch", g("a", gp("b", 1), sw("s1", 2)), g("b", gp("a", 1), sw("s1", 3)), 3, true},
		{"unknown remote", g("a", NVLink{Target: "b", Remote: RemoteUnknown, Count: 4}), g("b"), 0, false},
	} {
		h := &Host{GPUs: []GPU{tc.a, tc.b}}
		n, via := h.NVLinkCount(0, 1)
		if n != tc.want || via != tc.viaSwi {
			t.Errorf("%s: NV%d via switch %v, want NV%d %v", tc.name, n, via, tc.want, tc.viaSwi)
		}
		if n, _ := h.NVLinkCount(0, 0); n != 0 {
			t.Errorf("%s: a GPU with itself: NV%d", tc.name, n)
		}
	}
}

func TestAssignRails(t *testing.T) {
	h := fixtureRails()
	for _, tc := range []struct {
		name     string
		file     []string
		override []string
		want     map[string]int
		wantErr  bool
	}{
		{"auto: by nearest GPU, RDMA only", nil, nil, map[string]int{"ib-b": 0, "ib-a": 1, "eth0": -1}, false},
		{"from file", []string{"ib-a", "ib-b"}, nil, map[string]int{"ib-a": 0, "ib-b": 1, "eth0": -1}, false},
		{"setting beats file", []string{"ib-a", "ib-b"}, []string{"ib-b"}, map[string]int{"ib-b": 0, "ib-a": -1, "eth0": -1}, false},
		{"unknown name", nil, []string{"mlx5_7"}, nil, true},
	} {
		h.Rails = tc.file
		err := AssignRails(h, tc.override)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v", tc.name, err)
			continue
		}
		for name, rail := range tc.want {
			if got := h.NICs[nicByName(h, name)].Rail; got != rail {
				t.Errorf("%s: %s rail %d, want %d", tc.name, name, got, rail)
			}
		}
	}
}

// fixtureRails: GPU0 sits next to ib-b, GPU1 next to ib-a (bus order is
// the other way round).
func fixtureRails() *Host {
	return &Host{
		GPUs: []GPU{
			{Index: 0, BusID: "0000:90:00.0", NUMANode: 0, PCI: PCIPos{Root: "r1", Switches: []string{"s1"}}},
			{Index: 1, BusID: "0000:10:00.0", NUMANode: 0, PCI: PCIPos{Root: "r0", Switches: []string{"s0"}}},
		},
		NICs: []NIC{
			{Name: "eth0", BusID: "0000:01:00.0", NUMANode: 0, PCI: PCIPos{Root: "r0"}},
			{Name: "ib-a", RDMA: true, BusID: "0000:11:00.0", NUMANode: 0, PCI: PCIPos{Root: "r0", Switches: []string{"s0"}}},
			{Name: "ib-b", RDMA: true, BusID: "0000:91:00.0", NUMANode: 0, PCI: PCIPos{Root: "r1", Switches: []string{"s1"}}},
		},
	}
}

func TestParseRails(t *testing.T) {
	if got, err := ParseRails(" mlx5_0, mlx5_2 ,mlx5_1"); err != nil || len(got) != 3 || got[1] != "mlx5_2" {
		t.Errorf("ParseRails = %q, %v", got, err)
	}
	for _, bad := range []string{"a,,b", "a,b,a"} {
		if _, err := ParseRails(bad); err == nil {
			t.Errorf("ParseRails(%q) accepted", bad)
		}
	}
	if got, err := ParseRails(""); got != nil || err != nil {
		t.Errorf("ParseRails(\"\") = %q, %v", got, err)
	}
}
