package topo

import (
	"reflect"
	"strings"
	"testing"
)

func TestPCIPosFolding(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		bus        string
		want       PCIPos
		ok         bool
	}{
		{"on root port", "pci0000:00/0000:00:01.0/0000:01:00.0", "0000:01:00.0", PCIPos{Root: "pci0000:00"}, true},
		{"on root bus", "pci0000:00/0000:00:03.0", "0000:00:03.0", PCIPos{Root: "pci0000:00"}, true},
		{"one switch", "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", "0000:18:00.0",
			PCIPos{Root: "pci0000:15", Switches: []string{"0000:16:00.0"}}, true},
		{"two switches", "pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:00.0/0000:43:00.0/0000:44:00.0/0000:45:00.0", "0000:45:00.0",
			PCIPos{Root: "pci0000:40", Switches: []string{"0000:41:00.0", "0000:43:00.0"}}, true},
		{"net device past the function", "pci0000:00/0000:00:03.0/virtio0/net/eth0", "0000:00:03.0", PCIPos{Root: "pci0000:00"}, true},
		{"upper case, long domain", "pci10000:00/10000:00:01.0/10000:01:00.0", "10000:01:00.0", PCIPos{Root: "pci10000:00"}, true},
		{"virtual", "virtual/net/lo", "", PCIPos{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bus, pos, ok := pciPos(strings.Split(tc.path, "/"))
			if ok != tc.ok || bus != tc.bus || !reflect.DeepEqual(pos, tc.want) {
				t.Errorf("pciPos(%s) = %q %+v %v, want %q %+v %v", tc.path, bus, pos, ok, tc.bus, tc.want, tc.ok)
			}
		})
	}
}

func TestNormBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:1B:00.0":     "0000:1b:00.0",
		"0000:1b:00.0":         "0000:1b:00.0",
		"FFFFFFFF:FF:FF.0":     "ffffffff:ff:ff.0",
		"00000000:07:00.0\x00": "0000:07:00.0",
		"garbage":              "garbage",
	} {
		if got := NormBusID(in); got != want {
			t.Errorf("NormBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		mask []uint64
		want string
	}{
		{nil, ""},
		{[]uint64{0xf}, "0-3"},
		{[]uint64{0x1 | 0x100}, "0,8"},
		{[]uint64{1 << 63, 1}, "63-64"},
		{[]uint64{0, 0xffff}, "64-79"},
	} {
		if got := CPUList(tc.mask); got != tc.want {
			t.Errorf("CPUList(%x) = %q, want %q", tc.mask, got, tc.want)
		}
	}
	for in, want := range map[string]string{
		"00000000,0fffff00,000fffff": "0-19,40-59",
		"0000ffff,f00000ff,fff00000": "20-39,60-79",
		"ffffffff":                   "0-31",
	} {
		if got, err := hexMaskList(in); err != nil || got != want {
			t.Errorf("hexMaskList(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestNICsFromSysfs: an RDMA NIC with its net device, a dual-port RDMA
// NIC, a virtio NIC with no speed, and lo (virtual, left out), on a
// two-node host.
func TestNICsFromSysfs(t *testing.T) {
	f := newFakeSys(t)
	f.numaNode("0", "0-7")
	f.numaNode("1", "8-15")
	ib := f.pci("pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:19:00.0", map[string]string{"numa_node": "0"})
	f.rdma("mlx5_0", ib, map[string]string{"1": "400 Gb/sec (4X NDR)"})
	f.netdev("ibp25s0", ib, "400000")
	dual := f.pci("pci0000:97/0000:97:01.0/0000:98:00.0", map[string]string{"numa_node": "1"})
	f.rdma("mlx5_1", dual, map[string]string{"1": "200 Gb/sec (4X HDR)", "2": "100 Gb/sec (4X EDR)"})
	f.dir("devices/pci0000:00/0000:00:03.0/virtio0")
	f.file("devices/pci0000:00/0000:00:03.0/numa_node", "-1")
	f.link("bus/pci/devices/0000:00:03.0", "devices/pci0000:00/0000:00:03.0")
	f.netdev("eth0", "devices/pci0000:00/0000:00:03.0/virtio0", "-1")
	f.netdev("lo", "", "")

	got, unknown := sysfs{root: f.root}.nics(2)
	if len(unknown) != 0 {
		t.Errorf("unknown: %q", unknown)
	}
	want := []NIC{
		{Name: "eth0", Netdev: "eth0", BusID: "0000:00:03.0", NUMANode: -1, PCI: PCIPos{Root: "pci0000:00"}, Rail: -1,
			Unknown: []string{"numa node: firmware gives none (-1)", "speed: not reported (link down, or a virtual NIC)"}},
		{Name: "mlx5_0", Netdev: "ibp25s0", Port: 1, RDMA: true, LinkLayer: "InfiniBand", Speed: 400e9, BusID: "0000:19:00.0",
			NUMANode: 0, PCI: PCIPos{Root: "pci0000:15", Switches: []string{"0000:16:00.0"}}, Rail: -1},
		{Name: "mlx5_1:1", Port: 1, RDMA: true, LinkLayer: "InfiniBand", Speed: 200e9, BusID: "0000:98:00.0",
			NUMANode: 1, PCI: PCIPos{Root: "pci0000:97"}, Rail: -1},
		{Name: "mlx5_1:2", Port: 2, RDMA: true, LinkLayer: "InfiniBand", Speed: 100e9, BusID: "0000:98:00.0",
			NUMANode: 1, PCI: PCIPos{Root: "pci0000:97"}, Rail: -1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("nics:\n got %+v\nwant %+v", got, want)
	}
}

func TestNUMAOfSingleNodeHost(t *testing.T) {
	f := newFakeSys(t)
	f.numaNode("0", "0-31")
	f.pci("pci0000:00/0000:00:01.0/0000:01:00.0", map[string]string{"numa_node": "-1",
		"current_link_speed": "2.5 GT/s PCIe", "current_link_width": "16", "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"})
	s := sysfs{root: f.root}
	nodes, err := s.numa()
	if err != nil || len(nodes) != 1 || nodes[0] != (NUMANode{ID: 0, CPUs: "0-31"}) {
		t.Fatalf("numa() = %+v, %v", nodes, err)
	}
	pos, numa, link, _, unknown := s.pciDevice("0000:01:00.0", len(nodes))
	if numa != 0 || pos.Root != "pci0000:00" || link != (PCIeLink{Gen: 1, Width: 16, MaxGen: 5, MaxWidth: 16}) || len(unknown) != 0 {
		t.Errorf("pciDevice = %+v numa %d link %+v unknown %q", pos, numa, link, unknown)
	}
	if _, numa, _, _, unknown := s.pciDevice("0000:01:00.0", 2); numa != -1 || len(unknown) != 1 {
		t.Errorf("two-node host: numa %d unknown %q, want -1 and a reason", numa, unknown)
	}
}
