//go:build cgo

package main

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/flexlink/flexlink/fabric/topo"
)

// TestDetectVMH200x2 reproduces the 2xH200 VM of docs/h200x2-topology.txt
// with go-nvml's simulated server: NVML answers no NVLink version or speed
// and gives the links' remote bus id as all ones. flexinfo must show the
// nominal per-link rate and a direct NV18, with no NVSwitch.
func TestDetectVMH200x2(t *testing.T) {
	s := dgxa100.New()
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 2, nvml.SUCCESS }
	for i, dv := range s.Devices[:2] {
		dev := dv.(*dgxa100.Device)
		dev.Name, dev.Architecture = "NVIDIA H200", nvml.DEVICE_ARCH_HOPPER
		bus := []string{"00000000:00:06.0", "00000000:00:07.0"}[i]
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], bus)
			return p, nvml.SUCCESS
		}
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
		dev.GetCpuAffinityFunc = func(n int) ([]uint, nvml.Return) {
			m := make([]uint, n)
			m[0] = 0xffffffff
			return m, nvml.SUCCESS
		}
		pcie := func(v int) func() (int, nvml.Return) { return func() (int, nvml.Return) { return v, nvml.SUCCESS } }
		dev.GetCurrPcieLinkGenerationFunc, dev.GetMaxPcieLinkGenerationFunc = pcie(5), pcie(5)
		dev.GetCurrPcieLinkWidthFunc, dev.GetMaxPcieLinkWidthFunc = pcie(16), pcie(16)
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
		dev.GetNvLinkVersionFunc = func(int) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		dev.GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
		dev.GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
	}
	root := t.TempDir()
	h, err := topo.DetectWith(s, topo.Options{SysRoot: root, Hostname: "vm"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeReport(&b, h); err != nil {
		t.Fatal(err)
	}
	out := strings.ReplaceAll(b.String(), root, "SYSFS")
	golden(t, "h200x2-vm.txt", out)
	for _, want := range []string{"NV18", "NVLink 18 x 26.6 GB/s (nominal)", "nvlink x18 478.8 GB/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"NVSwitch", "ffffffff", "? B/s"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q:\n%s", bad, out)
		}
	}
}
