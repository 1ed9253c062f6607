package transports

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/topo"
)

func TestPairRails(t *testing.T) {
	r := func(dev int, subnet string) Rail {
		return Rail{Dev: dev, Name: "eth" + string(rune('0'+dev)), Subnet: subnet}
	}
	four := []Rail{r(0, "10.0.0.0/24"), r(1, "10.0.1.0/24"), r(2, "10.0.2.0/24"), r(3, "10.0.3.0/24")}
	var ten []Rail
	for i := range 10 {
		ten = append(ten, Rail{Dev: i, Name: fmt.Sprintf("eth%d", i), Subnet: fmt.Sprintf("10.1.%d.0/24", i)})
	}
	kinds := func(n int) (out []string) {
		for i := range n {
			out = append(out, fmt.Sprintf("net%d", i))
		}
		return out
	}
	for _, c := range []struct {
		name   string
		lo, hi []Rail
		max    int
		want   []string
	}{
		{"all rails by subnet", four, four, 0, []string{"net0", "net1", "net2", "net3"}},
		{"FLEXLINK_NET_RAILS=1", four, four, 1, []string{"net0"}},
		{"same rail pinned", []Rail{four[2]}, []Rail{four[2]}, 0, []string{"net2"}},
		{"pinned vs all", []Rail{four[2]}, four, 0, []string{"net2"}},
		{"all vs pinned", four, []Rail{four[3]}, 0, []string{"net3"}},
		{"cross rail: spine", []Rail{four[1]}, []Rail{four[2]}, 0, []string{"net1:net2"}},
		{"ordered differently", four, []Rail{four[3], four[1], four[0], four[2]}, 0, []string{"net0", "net1", "net2", "net3"}},
		{"different device numbers", []Rail{r(0, "a"), r(1, "b")}, []Rail{r(0, "b"), r(1, "a")}, 0, []string{"net0:net1", "net1:net0"}},
		{"unknown subnets pair by position", []Rail{r(0, ""), r(1, "")}, []Rail{r(0, "x"), r(1, "y"), r(2, "z")}, 0, []string{"net0", "net1"}},
		{"unknown subnets, max", []Rail{r(0, ""), r(1, "")}, []Rail{r(0, ""), r(1, "")}, 1, []string{"net0"}},
		{"none", nil, four, 0, nil},
		{"more NICs than a channel balances", ten, ten, 0, kinds(8)},
		{"FLEXLINK_NET_RAILS over the channel's links", ten, ten, 64, kinds(8)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := PairRails(c.lo, c.hi, c.max); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestSplitKind(t *testing.T) {
	for _, c := range []struct {
		kind          string
		lower         bool
		local, remote string
	}{
		{"net1:net2", true, "net1", "net2"},
		{"net1:net2", false, "net2", "net1"},
		{"net3", false, "net3", "net3"},
		{"shm", true, "shm", "shm"},
	} {
		if l, r := SplitKind(c.kind, c.lower); l != c.local || r != c.remote {
			t.Errorf("SplitKind(%q, %v) = %q, %q; want %q, %q", c.kind, c.lower, l, r, c.local, c.remote)
		}
	}
}

func TestSelectDevices(t *testing.T) {
	devs := []net.Device{{Name: "eth0"}, {Name: "eth1"}, {Name: "eth2"}, {Name: "eth3"}}
	for _, c := range []struct {
		name    string
		devices string
		own     bool
		local   int
		want    []int
		err     string
	}{
		{"every NIC", "", false, 3, []int{0, 1, 2, 3}, ""},
		{"own", "", true, 2, []int{2}, ""},
		{"own wraps", "", true, 6, []int{2}, ""},
		{"pinned", "eth3, eth1", false, 0, []int{3, 1}, ""},
		{"pinned beats own", "eth1", true, 3, []int{1}, ""},
		{"unknown", "eth9", false, 0, nil, `no network device "eth9" (have eth0,eth1,eth2,eth3)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var own *Own
			if c.own {
				own = &Own{LocalRank: c.local, GPU: -1}
			}
			got, err := SelectDevices(devs, c.devices, own)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestKindsRailPairs(t *testing.T) {
	got, err := Kinds(Pair{Mode: ModeAuto, Links: "shm,net", RailPairs: []string{"net1:net2"}, MyRails: 1, PeerRails: 1})
	if err != nil || !reflect.DeepEqual(got, []string{"net1:net2"}) {
		t.Fatalf("got %v, %v", got, err)
	}
}

// switchHost is a host of two PCIe switches (roots r0 and r1); gpus and
// nics give each switch's GPU count and RDMA NIC count. GPUs are numbered
// switch by switch from 0, NICs likewise (mlx5_<i>, net device ib<i>, on
// rail i); an Ethernet NIC eth0 on the host bridge has no rail.
func switchHost(gpus, nics int) *topo.Host {
	h := &topo.Host{Hostname: "h"}
	for sw := range 2 {
		pos := topo.PCIPos{Root: fmt.Sprintf("r%d", sw), Switches: []string{fmt.Sprintf("sw%d", sw)}}
		for range gpus {
			h.GPUs = append(h.GPUs, topo.GPU{Index: len(h.GPUs), NUMANode: -1, PCI: pos})
		}
		for range nics {
			i := len(h.NICs)
			h.NICs = append(h.NICs, topo.NIC{Name: fmt.Sprintf("mlx5_%d", i), Netdev: fmt.Sprintf("ib%d", i), RDMA: true, NUMANode: -1, PCI: pos, Rail: i})
		}
	}
	h.NICs = append(h.NICs, topo.NIC{Name: "eth0", Netdev: "eth0", NUMANode: -1, PCI: topo.PCIPos{Root: "r0"}, Rail: -1})
	return h
}

// TestSelectDevicesPlanned: with PXN, a rank opens the NICs the topology
// planner gives its GPU (the nearest, every GPU its own where a switch has
// as many NICs as GPUs, shared where it has fewer), found among the
// provider's devices by name or net device, in whatever order the
// provider lists them; FLEXLINK_NET_DEVICES still wins; an unknown
// topology, or one naming none of the devices, falls back to local rank
// modulo the device count. The wanted devices are worked out by hand from
// the layouts (independent of topo's code).
func TestSelectDevicesPlanned(t *testing.T) {
	// The provider lists interfaces by name: not the host's NIC order.
	devs := []net.Device{{Name: "eth0"}, {Name: "ib0"}, {Name: "ib1"}, {Name: "ib2"}, {Name: "ib3"}}
	dev := func(names ...string) []int {
		var out []int
		for _, n := range names {
			out = append(out, deviceIndex(devs, n))
		}
		return out
	}
	twoTwo, twoOne, oneTwo := switchHost(2, 2), switchHost(2, 1), switchHost(1, 2)
	for _, c := range []struct {
		name    string
		devs    []net.Device // nil: devs
		devices string
		own     Own
		want    []int
	}{
		// 2 GPUs + 2 NICs per switch (DGX A100): each GPU its own NIC.
		{"2+2 gpu0", nil, "", Own{LocalRank: 0, GPU: 0, Host: twoTwo}, dev("ib0")},
		{"2+2 gpu1", nil, "", Own{LocalRank: 1, GPU: 1, Host: twoTwo}, dev("ib1")},
		{"2+2 gpu2", nil, "", Own{LocalRank: 2, GPU: 2, Host: twoTwo}, dev("ib2")},
		{"2+2 gpu3", nil, "", Own{LocalRank: 3, GPU: 3, Host: twoTwo}, dev("ib3")},
		// The GPU decides, not the local rank.
		{"2+2 local0 drives gpu3", nil, "", Own{LocalRank: 0, GPU: 3, Host: twoTwo}, dev("ib3")},
		// 2 GPUs + 1 NIC per switch: the switch's GPUs share its NIC
		// (local rank modulo would send GPU 1 to the other switch's NIC).
		{"2+1 gpu0", nil, "", Own{LocalRank: 0, GPU: 0, Host: twoOne}, dev("ib0")},
		{"2+1 gpu1", nil, "", Own{LocalRank: 1, GPU: 1, Host: twoOne}, dev("ib0")},
		{"2+1 gpu2", nil, "", Own{LocalRank: 2, GPU: 2, Host: twoOne}, dev("ib1")},
		{"2+1 gpu3", nil, "", Own{LocalRank: 3, GPU: 3, Host: twoOne}, dev("ib1")},
		// 1 GPU + 2 NICs per switch: the GPU takes both, primary first.
		{"1+2 gpu0", nil, "", Own{LocalRank: 0, GPU: 0, Host: oneTwo}, dev("ib0", "ib1")},
		{"1+2 gpu1", nil, "", Own{LocalRank: 1, GPU: 1, Host: oneTwo}, dev("ib2", "ib3")},
		// A rank without a GPU: the railed NICs dealt by local rank (eth0
		// has no rail).
		{"no gpu local1", nil, "", Own{LocalRank: 1, GPU: -1, Host: twoTwo}, dev("ib1")},
		{"no gpu local5", nil, "", Own{LocalRank: 5, GPU: -1, Host: twoTwo}, dev("ib1")},
		// The provider has only some NICs (FLEXLINK_NET_IFNAME=ib2,ib3):
		// GPU 0's switch has none, so it shares the nearest it has.
		{"provider lacks the switch's NICs", []net.Device{{Name: "ib2"}, {Name: "ib3"}}, "", Own{LocalRank: 0, GPU: 0, Host: twoTwo}, []int{0}},
		// A device named as the RDMA device (UCX) matches too.
		{"by rdma name", []net.Device{{Name: "mlx5_1"}, {Name: "mlx5_0"}}, "", Own{LocalRank: 0, GPU: 1, Host: twoTwo}, []int{0}},
		// FLEXLINK_NET_DEVICES overrides the planner.
		{"pinned", nil, "ib3", Own{LocalRank: 0, GPU: 0, Host: twoTwo}, dev("ib3")},
		// Unknown topology, or one naming no device: local rank modulo.
		{"no topology", nil, "", Own{LocalRank: 7, GPU: 0}, []int{7 % len(devs)}},
		{"topology names no device", []net.Device{{Name: "enp1s0"}, {Name: "enp2s0"}}, "", Own{LocalRank: 3, GPU: 0, Host: twoTwo}, []int{1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.devs
			if d == nil {
				d = devs
			}
			got, err := SelectDevices(d, c.devices, &c.own)
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}
