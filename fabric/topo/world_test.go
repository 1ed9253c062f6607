package topo

import (
	"reflect"
	"testing"

	"github.com/flexlink/flexlink/fabric"
)

// gather encodes every rank's member record (rank r on hosts[r], driving
// gpus[r]), round-trips them through DecodeWorld as the core's exchange
// does, and checks that decoding is deterministic.
func gather(t *testing.T, hosts []*Host, gpus []int) *World {
	t.Helper()
	all := make([][]byte, len(hosts))
	for r := range hosts {
		b, err := EncodeMember(hosts[r], gpus[r])
		if err != nil {
			t.Fatal(err)
		}
		all[r] = b
	}
	w, err := DecodeWorld(all)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeWorld(all)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w, again) {
		t.Fatal("DecodeWorld built two different worlds from the same bytes")
	}
	return w
}

// twoHosts: the fixture twice, as hosts a and b, ranks 0..n-1 on a.
func twoHosts(t *testing.T, name string) ([]*Host, []int) {
	a, b := fixture(t, name), fixture(t, name)
	a.Hostname, b.Hostname = "a", "b"
	var hosts []*Host
	var gpus []int
	for _, h := range []*Host{a, b} {
		for _, g := range h.GPUs {
			hosts = append(hosts, h)
			gpus = append(gpus, g.Index)
		}
	}
	return hosts, gpus
}

func kinds(ls []LinkInfo) []fabric.Kind {
	var k []fabric.Kind
	for _, l := range ls {
		k = append(k, l.Kind)
	}
	return k
}

func TestWorldDGXH800(t *testing.T) {
	hosts, gpus := twoHosts(t, "dgx-h800.json")
	w := gather(t, hosts, gpus)
	if w.Size() != 16 {
		t.Fatalf("size %d", w.Size())
	}
	pcie := PCIeBW(5, 16)
	for _, tc := range []struct {
		name string
		a, b int
		want []LinkInfo
	}{
		{"NVSwitch pair", 0, 5, []LinkInfo{
			{Kind: fabric.KindNVLink, Count: 8, Bandwidth: 8 * 26.6e9, Latency: NominalNVLinkLatency, Rail: -1, Desc: "NV8 via NVSwitch"},
			{Kind: fabric.KindPCIe, Count: 1, Bandwidth: pcie, Latency: NominalPCIeLatency, Rail: -1, Desc: "PCIe staged through host memory (gen5 x16, gen5 x16)"},
			{Kind: fabric.KindShm, Count: 1, Bandwidth: NominalShmBW, Latency: NominalShmLatency, Rail: -1, Desc: "shared memory a"},
		}},
		{"same rail", 3, 11, []LinkInfo{
			{Kind: fabric.KindNet, Count: 1, Bandwidth: 50e9, Latency: NominalNetLatency, NICs: [2]string{"mlx5_3", "mlx5_3"}, Rail: 3, Desc: "RDMA a:mlx5_3 -> b:mlx5_3 (rail 3)"},
			{Kind: fabric.KindTCP, Count: 1, Bandwidth: 25e9 / 8, Latency: NominalTCPLatency, NICs: [2]string{"eno1", "eno1"}, Rail: -1, Desc: "TCP a:eno1 -> b:eno1"},
		}},
		{"other rail: lower rank's rail wins", 2, 14, []LinkInfo{
			{Kind: fabric.KindNet, Count: 1, Bandwidth: 50e9, Latency: NominalNetLatency, NICs: [2]string{"mlx5_2", "mlx5_2"}, Rail: 2, Desc: "RDMA a:mlx5_2 -> b:mlx5_2 (rail 2)"},
			{Kind: fabric.KindTCP, Count: 1, Bandwidth: 25e9 / 8, Latency: NominalTCPLatency, NICs: [2]string{"eno1", "eno1"}, Rail: -1, Desc: "TCP a:eno1 -> b:eno1"},
		}},
		{"other rail, seen from the higher rank", 14, 2, []LinkInfo{
			{Kind: fabric.KindNet, Count: 1, Bandwidth: 50e9, Latency: NominalNetLatency, NICs: [2]string{"mlx5_2", "mlx5_2"}, Rail: 2, Desc: "RDMA b:mlx5_2 -> a:mlx5_2 (rail 2)"},
			{Kind: fabric.KindTCP, Count: 1, Bandwidth: 25e9 / 8, Latency: NominalTCPLatency, NICs: [2]string{"eno1", "eno1"}, Rail: -1, Desc: "TCP b:eno1 -> a:eno1"},
		}},
		{"self", 4, 4, nil},
	} {
		if got := w.Links(tc.a, tc.b); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Links(%d, %d) =\n%+v\nwant\n%+v", tc.name, tc.a, tc.b, got, tc.want)
		}
	}
}

func TestWorldDGX1(t *testing.T) {
	hosts, gpus := twoHosts(t, "dgx1.xml")
	w := gather(t, hosts, gpus)
	for a := range 8 {
		for b := range 8 {
			if a == b {
				continue
			}
			ls := w.Links(a, b)
			n := dgx1NV[a][b]
			want := []fabric.Kind{fabric.KindPCIe, fabric.KindShm}
			if n > 0 {
				want = append([]fabric.Kind{fabric.KindNVLink}, want...)
				if ls[0].Count != n || ls[0].Bandwidth != float64(n)*25e9 {
					t.Errorf("GPU%d-GPU%d: %+v, want NV%d at %g B/s", a, b, ls[0], n, float64(n)*25e9)
				}
			}
			if !reflect.DeepEqual(kinds(ls), want) {
				t.Errorf("GPU%d-GPU%d: kinds %v, want %v", a, b, kinds(ls), want)
			}
		}
	}
	// GPU1 and GPU2 of different hosts: rails 0 and 1; the lower rank's
	// (rail 0) is used; mlx5_0 is 100 Gb/s EDR.
	ls := w.Links(1, 10)
	if ls[0].Kind != fabric.KindNet || ls[0].NICs != [2]string{"mlx5_0", "mlx5_0"} || ls[0].Rail != 0 || ls[0].Bandwidth != 100e9/8 {
		t.Errorf("Links(1, 10)[0] = %+v", ls[0])
	}
}

// TestWorldMixed: the H200 pair with a GPU-less CPU node; no RDMA anywhere.
func TestWorldMixed(t *testing.T) {
	gpuHost, cpuHost := fixture(t, "h200x2.json"), fixture(t, "nogpu.yaml")
	w := gather(t, []*Host{gpuHost, gpuHost, cpuHost}, []int{0, 1, -1})
	if got := w.Links(0, 1); len(got) != 3 || got[0].Kind != fabric.KindNVLink || got[0].Count != 18 || got[0].Bandwidth != 18*26.6e9 || got[0].Desc != "NV18" {
		t.Errorf("Links(0, 1) = %+v", got)
	}
	got := w.Links(1, 2)
	want := []LinkInfo{{Kind: fabric.KindTCP, Count: 1, Bandwidth: NominalTCPBW, Latency: NominalTCPLatency,
		NICs: [2]string{"eth0", "eno1"}, Rail: -1, Desc: "TCP h200x2:eth0 -> cpu-node:eno1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Links(1, 2) = %+v, want %+v (eth0's speed is unknown: nominal)", got, want)
	}
	if !w.SameHost(0, 1) || w.SameHost(1, 2) || w.Member(2).GPU != -1 {
		t.Errorf("SameHost / Member wrong")
	}
}

func TestNewWorldErrors(t *testing.T) {
	h := fixture(t, "h200x2.json")
	if _, err := NewWorld([]Member{{Host: h, GPU: 0}, {Host: h, GPU: 2}}); err == nil {
		t.Errorf("GPU 2 of a 2-GPU host accepted")
	}
	if _, err := NewWorld([]Member{{Host: nil, GPU: 0}}); err == nil {
		t.Errorf("nil host accepted")
	}
	other := fixture(t, "h200x2.json")
	other.GPUs = other.GPUs[:1]
	if _, err := NewWorld([]Member{{Host: h, GPU: 0}, {Host: other, GPU: 0}}); err == nil {
		t.Errorf("two ranks of host %s with different GPU lists accepted", h.Hostname)
	}
	same := fixture(t, "h200x2.json")
	w, err := NewWorld([]Member{{Host: h, GPU: 0}, {Host: same, GPU: 1}})
	if err != nil || w.Member(1).Host != h {
		t.Errorf("equal topologies of one host should be shared: %v", err)
	}
}
