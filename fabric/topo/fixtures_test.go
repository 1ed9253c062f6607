package topo

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fixture loads hostfiles/topo/<name>.
func fixture(t *testing.T, name string) *Host {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	h, err := Load(filepath.Join(filepath.Dir(self), "../../hostfiles/topo", name))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// dgx1NV is the DGX-1 (V100) hybrid cube-mesh as `nvidia-smi topo -m`
// prints it: NVLink counts between GPUs.
var dgx1NV = [8][8]int{
	{0, 1, 1, 2, 2, 0, 0, 0},
	{1, 0, 2, 1, 0, 2, 0, 0},
	{1, 2, 0, 2, 0, 0, 1, 0},
	{2, 1, 2, 0, 0, 0, 0, 1},
	{2, 0, 0, 0, 0, 1, 1, 2},
	{0, 2, 0, 0, 1, 0, 2, 1},
	{0, 0, 1, 0, 1, 2, 0, 2},
	{0, 0, 0, 1, 2, 1, 2, 0},
}

// checkDGX1 asserts the DGX-1's layout: the NVLink mesh (6 NVLink2 links
// per GPU), one PLX switch per GPU pair with one EDR NIC, two sockets.
func checkDGX1(t *testing.T, h *Host) {
	t.Helper()
	if len(h.GPUs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(h.GPUs))
	}
	for i := range 8 {
		total := 0
		for j := range 8 {
			n, sw := h.NVLinkCount(i, j)
			if n != dgx1NV[i][j] || sw {
				t.Errorf("GPU%d-GPU%d: NV%d (switch %v), want NV%d direct", i, j, n, sw, dgx1NV[i][j])
			}
			total += n
			var want Distance
			switch {
			case i/2 == j/2:
				want = PIX
			case i/4 == j/4:
				want = PHB
			default:
				want = SYS
			}
			if i != j && h.GPUDistance(i, j) != want {
				t.Errorf("GPU%d-GPU%d: %v, want %v", i, j, h.GPUDistance(i, j), want)
			}
		}
		if total != 6 {
			t.Errorf("GPU%d has %d NVLinks, want 6", i, total)
		}
		if g := h.GPUs[i]; g.LinkBW != 25e9 || !g.LinkBWNominal {
			t.Errorf("GPU%d link bw %g nominal %v, want 25e9 nominal", i, g.LinkBW, g.LinkBWNominal)
		}
	}
	for k := range 4 {
		n := nicByName(h, "mlx5_"+string(rune('0'+k)))
		if n < 0 {
			t.Fatalf("no mlx5_%d", k)
		}
		if h.NICs[n].Rail != k || !h.NICs[n].RDMA || h.NICs[n].Speed != 100e9 {
			t.Errorf("mlx5_%d: %+v, want rail %d, RDMA, 100 Gb/s", k, h.NICs[n], k)
		}
		for i := range 8 {
			var want Distance
			switch {
			case i/2 == k:
				want = PIX
			case i/4 == k/2:
				want = PHB
			default:
				want = SYS
			}
			if d := h.NICDistance(i, n); d != want {
				t.Errorf("GPU%d-mlx5_%d: %v, want %v", i, k, d, want)
			}
		}
	}
	if len(h.NUMA) != 2 || h.NUMA[0].CPUs != "0-19,40-59" || h.NUMA[1].CPUs != "20-39,60-79" {
		t.Errorf("numa %+v", h.NUMA)
	}
}

func TestFixtureDGX1(t *testing.T) {
	h := fixture(t, "dgx1.json")
	checkDGX1(t, h)
	if n := nicByName(h, "enp1s0f0"); n < 0 || h.NICs[n].Rail != -1 || h.NICDistance(0, n) != PHB || h.NICDistance(4, n) != SYS {
		t.Errorf("enp1s0f0 should be a railless NIC on socket 0: %+v", h.NICs)
	}
}

func TestFixtureDGXH800(t *testing.T) {
	h := fixture(t, "dgx-h800.json")
	if len(h.GPUs) != 8 || len(h.NVSwitches()) != 4 {
		t.Fatalf("%d GPUs, %d NVSwitches; want 8 and 4", len(h.GPUs), len(h.NVSwitches()))
	}
	for i := range 8 {
		for j := range 8 {
			if i == j {
				continue
			}
			if n, sw := h.NVLinkCount(i, j); n != 8 || !sw {
				t.Errorf("GPU%d-GPU%d: NV%d switch %v, want NV8 through NVSwitch", i, j, n, sw)
			}
			want := NODE
			if i/4 != j/4 {
				want = SYS
			}
			if d := h.GPUDistance(i, j); d != want {
				t.Errorf("GPU%d-GPU%d: %v, want %v", i, j, d, want)
			}
		}
		for k := range 8 {
			n := nicByName(h, "mlx5_"+string(rune('0'+k)))
			want := map[bool]Distance{true: NODE, false: SYS}[i/4 == k/4]
			if i == k {
				want = PIX
			}
			if d := h.NICDistance(i, n); d != want {
				t.Errorf("GPU%d-mlx5_%d: %v, want %v", i, k, d, want)
			}
			if h.NICs[n].Rail != k || h.NICs[n].Speed != 400e9 {
				t.Errorf("mlx5_%d: rail %d speed %g, want rail %d, 400 Gb/s", k, h.NICs[n].Rail, h.NICs[n].Speed, k)
			}
		}
		if got := h.NearestNICs(i, true); len(got) != 1 || h.NICs[got[0]].Name != "mlx5_"+string(rune('0'+i)) {
			t.Errorf("GPU%d nearest NICs %v", i, got)
		}
	}
	if n := nicByName(h, "eno1"); h.NICs[n].Rail != -1 || h.NICs[n].RDMA {
		t.Errorf("eno1: %+v, want no rail, no RDMA", h.NICs[n])
	}
}

func TestFixtureH200x2(t *testing.T) {
	h := fixture(t, "h200x2.json")
	if len(h.GPUs) != 2 || len(h.NUMA) != 1 {
		t.Fatalf("%d GPUs, %d NUMA nodes; want 2 and 1", len(h.GPUs), len(h.NUMA))
	}
	if n, sw := h.NVLinkCount(0, 1); n != 18 || sw {
		t.Errorf("NV%d switch %v, want NV18 direct", n, sw)
	}
	for i, g := range h.GPUs {
		if g.PCIe != (PCIeLink{Gen: 5, Width: 16, MaxGen: 5, MaxWidth: 16}) || g.LinkBW != 26.6e9 {
			t.Errorf("GPU%d: pcie %+v link bw %g", i, g.PCIe, g.LinkBW)
		}
	}
	if len(h.NICs) != 1 || h.NICs[0].Name != "eth0" || h.NICs[0].RDMA || h.NICs[0].Rail != -1 || h.NICs[0].Speed != 0 {
		t.Errorf("nics %+v, want only eth0, no RDMA, no rail, speed unknown", h.NICs)
	}
}

func TestFixtureNoGPU(t *testing.T) {
	h := fixture(t, "nogpu.yaml")
	if len(h.GPUs) != 0 || !strings.Contains(h.NoGPU, "libnvidia-ml.so.1") {
		t.Errorf("GPUs %v, NoGPU %q: want none, with the dlopen reason", h.GPUs, h.NoGPU)
	}
	if len(h.NICs) != 1 || h.NICs[0].Speed != 10e9 || h.NICs[0].NUMANode != 0 || h.NICs[0].Rail != -1 {
		t.Errorf("nics %+v", h.NICs)
	}
}

// TestNCCLXMLImport reads the DGX-1 as NCCL would dump it and expects the
// same machine as the hand-written JSON, except what NCCL's format does
// not carry.
func TestNCCLXMLImport(t *testing.T) {
	h := fixture(t, "dgx1.xml")
	checkDGX1(t, h)
	j := fixture(t, "dgx1.json")
	for i := range h.GPUs {
		x, w := h.GPUs[i], j.GPUs[i]
		if x.BusID != w.BusID || x.NUMANode != w.NUMANode || x.CPUAffinity != w.CPUAffinity ||
			x.PCIe.MaxGen != w.PCIe.MaxGen || x.PCIe.MaxWidth != w.PCIe.MaxWidth || x.PCIe.Gen != 0 {
			t.Errorf("GPU%d: xml %+v\njson %+v", i, x, w)
		}
		if x.Name != "" || x.UUID != "" || len(x.Unknown) == 0 {
			t.Errorf("GPU%d: name %q uuid %q unknown %q: want them unknown, and said so", i, x.Name, x.UUID, x.Unknown)
		}
	}
	e := h.NICs[nicByName(h, "enp1s0f0")]
	if e.RDMA || e.NUMANode != -1 || e.PCI.Root != "" || len(e.Unknown) == 0 || e.Speed != 10e9 {
		t.Errorf("socket NIC listed under both CPUs: %+v, want NUMA and position unknown", e)
	}
}

func TestNCCLXMLNVSwitch(t *testing.T) {
	const x = `<system version="1">
  <cpu numaid="0" affinity="0000ffff">
    <pci busid="0000:16:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:18:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="0000:07:00.0" count="5" tclass="0x068000"/>
          <nvlink target="0000:06:00.0" count="5" tclass="0x068000"/>
          <nvlink target="0000:05:00.0" count="4" tclass="0x068000"/>
          <nvlink target="0000:08:00.0" count="4" tclass="0x068000"/>
        </gpu>
      </pci>
      <pci busid="0000:2a:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="90" rank="1" gdr="1"><nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/></gpu>
      </pci>
      <pci busid="0000:2b:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="2" sm="90" rank="2" gdr="1">
          <nvlink target="0000:07:00.0" count="5" tclass="0x068000"/>
          <nvlink target="0000:06:00.0" count="5" tclass="0x068000"/>
          <nvlink target="0000:05:00.0" count="4" tclass="0x068000"/>
          <nvlink target="0000:08:00.0" count="4" tclass="0x068000"/>
        </gpu>
      </pci>
    </pci>
  </cpu>
</system>`
	h, err := Parse([]byte(x))
	if err != nil {
		t.Fatal(err)
	}
	if n, sw := h.NVLinkCount(0, 2); n != 18 || !sw {
		t.Errorf("GPU0-GPU2: NV%d switch %v, want NV18 through the four switches", n, sw)
	}
	if n, _ := h.NVLinkCount(0, 1); n != 0 {
		t.Errorf("GPU0-GPU1 share no switch (GPU1 names the collapsed fabric), got NV%d", n)
	}
	if g := h.GPUs[0]; g.LinkBW != 26.6e9 || !g.LinkBWNominal || g.PCIe.MaxGen != 5 || g.CPUAffinity != "0-15" {
		t.Errorf("GPU0 %+v", g)
	}
	if d := h.GPUDistance(0, 2); d != PIX {
		t.Errorf("GPU0-GPU2 under one switch: %v, want PIX", d)
	}
}

func TestParseErrors(t *testing.T) {
	for name, in := range map[string]string{
		"empty":           "  ",
		"bad json":        `{"hostname": `,
		"unknown field":   `{"hostname": "a", "gpus": [], "nics": [], "bogus": 1}`,
		"xml root":        `<topology/>`,
		"duplicate index": `{"hostname": "a", "gpus": [{"index": 0, "bus_id": "0000:01:00.0"}, {"index": 0, "bus_id": "0000:02:00.0"}]}`,
		"dangling nvlink": `{"hostname": "a", "gpus": [{"index": 0, "bus_id": "0000:01:00.0", "nvlinks": [{"target": "0000:09:00.0", "remote": "gpu", "count": 2}]}]}`,
		"bad rail name":   `{"hostname": "a", "nics": [{"name": "mlx5_0", "rdma": true}], "rails": ["mlx5_9"]}`,
		"yaml type":       "hostname: [1, 2]\n",
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: Parse accepted %q", name, in)
		}
	}
}

func TestParseRejectsUnknownNestedField(t *testing.T) {
	for _, in := range []string{
		`{"hostname": "a", "gpus": [{"index": 0, "bus_id": "0000:01:00.0", "numa": 1}]}`,
		"hostname: a\nnics:\n  - name: eth0\n    sped: 1\n",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("Parse(%q) = %v, want an unknown-field error", in, err)
		}
	}
}
