//go:build cgo && !nonvml

package topo

import (
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// vmH200x2 turns the simulated server into the 2xH200 VM of
// docs/h200x2-topology.txt: two GPUs, 18 NVLinks each whose remote bus id
// NVML gives as all ones and whose remote type it does not report, no
// NVLink speed field. version is what GetNvLinkVersion answers (-1: it
// fails); named gives the GPUs their real name and architecture.
func vmH200x2(s *dgxa100.Server, version int, named bool) {
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 2, nvml.SUCCESS }
	for _, dv := range s.Devices[:2] {
		dev := dv.(*dgxa100.Device)
		if named {
			dev.Name, dev.Architecture = "NVIDIA H200", nvml.DEVICE_ARCH_HOPPER
		} else {
			dev.Name = "Mock GPU"
			dev.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		}
		dev.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if l >= 18 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{Domain: 0xffffffff, Bus: 0xff, Device: 0xff}
			copy(p.BusId[:], "FFFFFFFF:FF:FF.0")
			return p, nvml.SUCCESS
		}
		dev.GetNvLinkVersionFunc = func(int) (uint32, nvml.Return) {
			if version < 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return uint32(version), nvml.SUCCESS
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, nvml.SUCCESS
		}
		dev.GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	}
}

// TestDetectVMH200x2: on the 2xH200 VM the per-link rate comes from the
// nominal table (by GPU name/architecture, or by NVML's version enum) and
// the all-ones remote bus id is a direct link to the other GPU, not an
// NVSwitch.
func TestDetectVMH200x2(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		named   bool
		wantVer int
	}{
		{"version query fails, rate by GPU name", -1, true, 0},
		{"version is nvmlNvlinkVersion_t 4.0, GPU not named", int(nvml.NVLINK_VERSION_4_0), false, 4},
		{"version 4.0 and GPU named", int(nvml.NVLINK_VERSION_4_0), true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newA100Sys(t, false)
			srv := a.server(degrade{uuidFails: -1, downLink: -1, p2pFails: -1})
			vmH200x2(srv, tc.version, tc.named)
			h, err := DetectWith(srv, Options{SysRoot: a.sys.root, Hostname: "vm"})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Validate(); err != nil {
				t.Fatal(err)
			}
			if len(h.GPUs) != 2 {
				t.Fatalf("%d GPUs, want 2", len(h.GPUs))
			}
			for i, g := range h.GPUs {
				want := []NVLink{{Target: a.bus[1-i], Remote: RemoteGPU, Count: 18, Version: tc.wantVer}}
				if !reflect.DeepEqual(g.NVLinks, want) {
					t.Errorf("GPU%d: nvlinks %+v, want %+v", i, g.NVLinks, want)
				}
				if g.LinkBW != 26.6e9 || !g.LinkBWNominal {
					t.Errorf("GPU%d: link bw %g nominal %v, want 26.6e9 nominal", i, g.LinkBW, g.LinkBWNominal)
				}
				if u := strings.Join(g.Unknown, "; "); strings.Contains(u, "nvlink") {
					t.Errorf("GPU%d: unknown %q", i, u)
				}
			}
			if sw := h.NVSwitches(); len(sw) != 0 {
				t.Errorf("NVSwitches %v, want none", sw)
			}
			if n, sw := h.NVLinkCount(0, 1); n != 18 || sw {
				t.Errorf("GPU0-GPU1: NV%d via switch %v, want NV18 direct", n, sw)
			}
		})
	}
}

// TestDetectUnknownRemotes: all-ones remote bus ids on more than two GPUs
// are direct links where NVML's NVLink P2P capability names a single peer,
// an NVLink fabric where the driver says the remote is a switch, and
// unknown otherwise.
func TestDetectUnknownRemotes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pairs    bool // NVLink P2P only within pairs 0-1, 2-3, ...
		typed    nvml.IntNvLinkDeviceType
		want     string
		wantPeer bool
	}{
		{"pairs by p2p", true, nvml.NVLINK_DEVICE_TYPE_UNKNOWN, RemoteGPU, true},
		{"fabric", false, nvml.NVLINK_DEVICE_TYPE_SWITCH, RemoteNVSwitch, false},
		{"unknown", false, nvml.NVLINK_DEVICE_TYPE_UNKNOWN, RemoteUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newA100Sys(t, false)
			srv := a.server(degrade{uuidFails: -1, downLink: -1, p2pFails: -1})
			for i, dv := range srv.Devices {
				dev := dv.(*dgxa100.Device)
				i := i
				dev.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
					p := nvml.PciInfo{Domain: 0xffffffff, Bus: 0xff, Device: 0xff}
					copy(p.BusId[:], "FFFFFFFF:FF:FF.0")
					return p, nvml.SUCCESS
				}
				dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) { return tc.typed, nvml.SUCCESS }
				dev.GetP2PStatusFunc = func(other nvml.Device, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
					j := other.(*dgxa100.Device).Index
					if c == nvml.P2P_CAPS_INDEX_NVLINK && tc.pairs && i/2 != j/2 {
						return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
					}
					return nvml.P2P_STATUS_OK, nvml.SUCCESS
				}
			}
			h, err := DetectWith(srv, Options{SysRoot: a.sys.root, Hostname: "sim"})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Validate(); err != nil {
				t.Fatal(err)
			}
			for i, g := range h.GPUs {
				target := fabricTarget
				if tc.wantPeer {
					target = a.bus[i^1]
				}
				want := []NVLink{{Target: target, Remote: tc.want, Count: 12, Version: 3}}
				if !reflect.DeepEqual(g.NVLinks, want) {
					t.Errorf("GPU%d: nvlinks %+v, want %+v", i, g.NVLinks, want)
				}
				if u := strings.Join(g.Unknown, "; "); strings.Contains(u, "no remote bus id") != (tc.want == RemoteUnknown) {
					t.Errorf("GPU%d: unknown %q", i, u)
				}
			}
			n, sw := h.NVLinkCount(0, 1)
			switch tc.want {
			case RemoteGPU:
				if n2, _ := h.NVLinkCount(0, 2); n != 12 || sw || n2 != 0 {
					t.Errorf("GPU0-GPU1 NV%d switch %v, GPU0-GPU2 NV%d; want NV12 direct, none", n, sw, n2)
				}
			case RemoteNVSwitch:
				if n != 12 || !sw || !reflect.DeepEqual(h.NVSwitches(), []string{fabricTarget}) {
					t.Errorf("GPU0-GPU1 NV%d switch %v, switches %v", n, sw, h.NVSwitches())
				}
			default:
				if n != 0 || len(h.NVSwitches()) != 0 {
					t.Errorf("GPU0-GPU1 NV%d, switches %v; want none", n, h.NVSwitches())
				}
			}
		})
	}
}
