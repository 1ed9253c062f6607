package transports

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric/net"
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
			got, err := SelectDevices(devs, c.devices, c.own, c.local)
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
