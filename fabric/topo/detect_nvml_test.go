//go:build cgo && !nonvml

package topo

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/flexlink/flexlink/internal/testenv"
)

// a100 describes the simulated DGX-A100-like host: four PCIe complexes
// (roots 00, 30, 60, 90; two per NUMA node), each a level-1 switch with
// two level-2 switches (one GPU each) and one HDR NIC; six NVSwitches
// c4..c9, two NVLink3 links from every GPU to each.
type a100 struct {
	bus     [8]string
	sw      [6]string
	sys     *fakeSys
	numa    [8]int
	l1, l2  [8]string // switches above each GPU
	roots   [4]string
	nicBus  [4]string
	nicSwit [4]string
}

func newA100Sys(t *testing.T, sysLinkFiles bool) *a100 {
	f := newFakeSys(t)
	a := &a100{sys: f}
	f.numaNode("0", "0-15")
	f.numaNode("1", "16-31")
	for p := range 4 {
		r := p * 0x30
		root := fmt.Sprintf("pci0000:%02x", r)
		a.roots[p] = root
		bdf := func(bus, dev int) string { return fmt.Sprintf("0000:%02x:%02x.0", bus, dev) }
		numa := fmt.Sprint(p / 2)
		l1 := root + "/" + bdf(r, 1) + "/" + bdf(r+1, 0)
		for k := range 2 {
			g := 2*p + k
			down := l1 + "/" + bdf(r+2, k)
			l2 := down + "/" + bdf(r+3+3*k, 0)
			gpu := l2 + "/" + bdf(r+4+3*k, 0) + "/" + bdf(r+5+3*k, 0)
			attrs := map[string]string{"numa_node": numa, "local_cpulist": []string{"0-15", "16-31"}[p/2], "class": "0x030200"}
			if sysLinkFiles && g < 4 {
				attrs["current_link_speed"] = "16.0 GT/s PCIe"
				attrs["current_link_width"] = "16"
				attrs["max_link_speed"] = "16.0 GT/s PCIe"
				attrs["max_link_width"] = "16"
			}
			f.pci(gpu, attrs)
			a.bus[g], a.numa[g] = bdf(r+5+3*k, 0), p/2
			a.l1[g], a.l2[g] = bdf(r+1, 0), bdf(r+3+3*k, 0)
		}
		nic := f.pci(l1+"/"+bdf(r+2, 2)+"/"+bdf(r+9, 0), map[string]string{"numa_node": numa})
		f.rdma(fmt.Sprintf("mlx5_%d", p), nic, map[string]string{"1": "200 Gb/sec (4X HDR)"})
		f.netdev(fmt.Sprintf("ibp%ds0", r+9), nic, "200000")
		a.nicBus[p], a.nicSwit[p] = bdf(r+9, 0), bdf(r+1, 0)
	}
	for s := range 6 {
		a.sw[s] = fmt.Sprintf("0000:%02x:00.0", 0xc4+s)
		f.pci("pci0000:c0/0000:c0:03.0/"+a.sw[s], map[string]string{"class": "0x068000", "numa_node": "1"})
	}
	f.dir("devices/pci0000:00/0000:00:03.0/virtio0")
	f.link("bus/pci/devices/0000:00:03.0", "devices/pci0000:00/0000:00:03.0")
	f.file("devices/pci0000:00/0000:00:03.0/numa_node", "0")
	f.netdev("eth0", "devices/pci0000:00/0000:00:03.0/virtio0", "25000")
	f.netdev("lo", "", "")
	return a
}

// degrade selects which NVML calls fail in the simulation.
type degrade struct {
	noNUMA, noAffinity, noPCIe, noRemoteType, noFieldValues bool
	uuidFails                                               int // GPU whose UUID fails, -1: none
	downLink                                                int // GPU whose link 11 is down, -1: none
	p2pFails                                                int // GPU whose P2P queries fail, -1: none
}

// server is go-nvml's simulated DGX A100, wired as a describes.
func (a *a100) server(d degrade) *dgxa100.Server {
	s := dgxa100.New()
	notSup := nvml.ERROR_NOT_SUPPORTED
	for i, dv := range s.Devices {
		dev := dv.(*dgxa100.Device)
		i := i
		dev.PciBusID = "0000" + strings.ToUpper(a.bus[i]) // NVML's 8-digit domain
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], dev.PciBusID)
			return p, nvml.SUCCESS
		}
		if d.uuidFails == i {
			dev.GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		}
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) {
			if d.noNUMA {
				return 0, notSup
			}
			return a.numa[i], nvml.SUCCESS
		}
		dev.GetCpuAffinityFunc = func(n int) ([]uint, nvml.Return) {
			if d.noAffinity {
				return nil, notSup
			}
			m := make([]uint, n)
			m[0] = 0xffff << (16 * a.numa[i])
			return m, nvml.SUCCESS
		}
		pcie := func(v int) func() (int, nvml.Return) {
			return func() (int, nvml.Return) {
				if d.noPCIe {
					return 0, notSup
				}
				return v, nvml.SUCCESS
			}
		}
		dev.GetCurrPcieLinkGenerationFunc, dev.GetMaxPcieLinkGenerationFunc = pcie(4), pcie(4)
		dev.GetCurrPcieLinkWidthFunc, dev.GetMaxPcieLinkWidthFunc = pcie(16), pcie(16)
		dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			switch {
			case l >= 12:
				return 0, nvml.ERROR_INVALID_ARGUMENT
			case l == 11 && d.downLink == i:
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], "0000"+strings.ToUpper(a.sw[l/2]))
			return p, nvml.SUCCESS
		}
		dev.GetNvLinkVersionFunc = func(int) (uint32, nvml.Return) { return 3, nvml.SUCCESS }
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			if d.noRemoteType {
				return 0, notSup
			}
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		dev.GetFieldValuesFunc = func(v []nvml.FieldValue) nvml.Return {
			if d.noFieldValues {
				return notSup
			}
			for k := range v {
				if v[k].FieldId != nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON {
					v[k].NvmlReturn = uint32(notSup)
					continue
				}
				v[k].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
				binary.LittleEndian.PutUint32(v[k].Value[:], 25781)
			}
			return nvml.SUCCESS
		}
		dev.GetP2PStatusFunc = func(other nvml.Device, _ nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if d.p2pFails == i {
				return 0, nvml.ERROR_UNKNOWN
			}
			if a.numa[i] != a.numa[other.(*dgxa100.Device).Index] {
				return nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
	}
	return s
}

func TestDetectSimulatedDGXA100(t *testing.T) {
	none := degrade{uuidFails: -1, downLink: -1, p2pFails: -1}
	all := degrade{noNUMA: true, noAffinity: true, noPCIe: true, noRemoteType: true, noFieldValues: true, uuidFails: 3, downLink: 5, p2pFails: 7}
	for _, tc := range []struct {
		name     string
		d        degrade
		linkFile bool
	}{
		{"driver answers everything", none, false},
		{"driver answers little: sysfs and the nominal table fill in", all, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newA100Sys(t, tc.linkFile)
			srv := a.server(tc.d)
			h, err := DetectWith(srv, Options{SysRoot: a.sys.root, Hostname: "sim"})
			if err != nil {
				t.Fatal(err)
			}
			if h.NoGPU != "" || len(h.GPUs) != 8 || h.Driver != "550.54.15" {
				t.Fatalf("NoGPU %q, %d GPUs, driver %q", h.NoGPU, len(h.GPUs), h.Driver)
			}
			checkA100(t, a, srv, h, tc.d)
		})
	}
}

func checkA100(t *testing.T, a *a100, srv *dgxa100.Server, h *Host, d degrade) {
	t.Helper()
	for i, g := range h.GPUs {
		pos := PCIPos{Root: a.roots[i/2], Switches: []string{a.l1[i], a.l2[i]}}
		cpus := []string{"0-15", "16-31"}[a.numa[i]]
		if g.Index != i || g.BusID != a.bus[i] || g.NUMANode != a.numa[i] || g.CPUAffinity != cpus || !reflect.DeepEqual(g.PCI, pos) {
			t.Errorf("GPU%d: index %d bus %s numa %d cpus %q pci %+v; want bus %s numa %d cpus %q pci %+v",
				i, g.Index, g.BusID, g.NUMANode, g.CPUAffinity, g.PCI, a.bus[i], a.numa[i], cpus, pos)
		}
		wantUUID := srv.Devices[i].(*dgxa100.Device).UUID
		if d.uuidFails == i {
			wantUUID = ""
		}
		if g.UUID != wantUUID || g.Name != "Mock NVIDIA A100-SXM4-40GB" {
			t.Errorf("GPU%d: uuid %q name %q, want %q", i, g.UUID, g.Name, wantUUID)
		}
		wantPCIe := PCIeLink{Gen: 4, Width: 16, MaxGen: 4, MaxWidth: 16}
		if d.noPCIe && i >= 4 { // neither NVML nor sysfs
			wantPCIe = PCIeLink{}
		}
		if g.PCIe != wantPCIe {
			t.Errorf("GPU%d: pcie %+v, want %+v", i, g.PCIe, wantPCIe)
		}
		var want []NVLink
		for s := range 6 {
			n := 2
			if d.downLink == i && s == 5 {
				n = 1
			}
			want = append(want, NVLink{Target: a.sw[s], Remote: RemoteNVSwitch, Count: n, Version: 3})
		}
		if !reflect.DeepEqual(g.NVLinks, want) {
			t.Errorf("GPU%d: nvlinks %+v, want %+v", i, g.NVLinks, want)
		}
		bw, nominal := 25.781e9, false
		if d.noFieldValues {
			bw, nominal = 25e9, true
		}
		if g.LinkBW != bw || g.LinkBWNominal != nominal {
			t.Errorf("GPU%d: link bw %g nominal %v, want %g %v", i, g.LinkBW, g.LinkBWNominal, bw, nominal)
		}
		for j := range 8 {
			want, ok := "ok", true
			if a.numa[i] != a.numa[j] {
				want = "topology not supported"
			}
			if d.p2pFails == i || j == i {
				want, ok = "", false
			}
			if got, has := g.P2P[j]; got != want || has != ok {
				t.Errorf("GPU%d p2p with GPU%d: %q %v, want %q %v", i, j, got, has, want, ok)
			}
		}
		unknown := strings.Join(g.Unknown, "; ")
		for _, bad := range []struct {
			on   bool
			text string
		}{{d.uuidFails == i, "uuid"}, {d.noPCIe && i >= 4, "pcie gen"}, {d.p2pFails == i, "p2p with GPU0"}} {
			if strings.Contains(unknown, bad.text) != bad.on {
				t.Errorf("GPU%d: unknown %q: mention of %q should be %v", i, unknown, bad.text, bad.on)
			}
		}
	}
	wantNV := 12
	for i := range 8 {
		for j := range 8 {
			want := wantNV
			if d.downLink == i || d.downLink == j {
				want = 11
			}
			if n, sw := h.NVLinkCount(i, j); i != j && (n != want || !sw) {
				t.Errorf("GPU%d-GPU%d: NV%d, want NV%d through NVSwitch", i, j, n, want)
			}
		}
	}
	for _, tc := range []struct {
		i, j int
		want Distance
	}{{0, 1, PXB}, {0, 2, NODE}, {0, 4, SYS}, {6, 7, PXB}} {
		if got := h.GPUDistance(tc.i, tc.j); got != tc.want {
			t.Errorf("GPU%d-GPU%d: %v, want %v", tc.i, tc.j, got, tc.want)
		}
	}
	for p := range 4 {
		n := nicByName(h, fmt.Sprintf("mlx5_%d", p))
		if n < 0 || h.NICs[n].Rail != p || h.NICs[n].BusID != a.nicBus[p] || h.NICDistance(2*p, n) != PXB {
			t.Errorf("mlx5_%d: %+v (want rail %d, PXB to GPU%d)", p, h.NICs, p, 2*p)
		}
	}
	if n := nicByName(h, "eth0"); n < 0 || h.NICs[n].Speed != 25e9 || h.NICDistance(0, n) != PHB || h.NICDistance(7, n) != SYS {
		t.Errorf("eth0: %+v", h.NICs)
	}
}

func TestDetectSimulatedFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*dgxa100.Server)
		want  string
	}{
		{"init fails", func(s *dgxa100.Server) {
			s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
		}, "NVML init: ERROR_DRIVER_NOT_LOADED"},
		{"no device", func(s *dgxa100.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
		}, "NVML reports no GPU"},
		{"count fails", func(s *dgxa100.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, "NVML device count: ERROR_UNKNOWN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newA100Sys(t, false)
			srv := a.server(degrade{uuidFails: -1, downLink: -1, p2pFails: -1})
			tc.setup(srv)
			h, err := DetectWith(srv, Options{SysRoot: a.sys.root, Hostname: "sim"})
			if err != nil {
				t.Fatal(err)
			}
			if len(h.GPUs) != 0 || h.NoGPU != tc.want {
				t.Errorf("GPUs %d NoGPU %q, want none and %q", len(h.GPUs), h.NoGPU, tc.want)
			}
			if len(h.NICs) != 5 || h.NICs[nicByName(h, "mlx5_2")].Rail != 2 {
				t.Errorf("NICs must still be detected, with rails by bus order: %+v", h.NICs)
			}
		})
	}
}

// TestDetectLocal runs the real detection on this machine. Without NVML it
// must say why, with dlopen's message; with GPUs it must describe them.
func TestDetectLocal(t *testing.T) {
	h, err := Detect(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(h.GPUs) == 0 {
		if !strings.Contains(h.NoGPU, "NVML") {
			t.Errorf("no GPU, and the reason %q does not name NVML", h.NoGPU)
		}
		testenv.MissingHardware(t, "GPU", h.NoGPU)
	}
	for _, g := range h.GPUs {
		if g.BusID == "" || g.UUID == "" || g.PCI.Root == "" {
			t.Errorf("GPU%d lacks bus id, uuid or PCI position: %+v", g.Index, g)
		}
	}
	b, _ := h.JSON()
	t.Logf("%s", b)
}
