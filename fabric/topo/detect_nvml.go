//go:build cgo

package topo

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML is the part of the NVML library that detection uses.
// nvml.Interface satisfies it (the real library from nvml.New, or
// go-nvml's simulated servers such as mock/dgxa100).
type NVML interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// fabricTarget is the remote bus id NVML gives for links into an NVLink
// fabric whose switches are not visible as PCI devices (B200, GB200).
const fabricTarget = "ffffffff:ff:ff.0"

// nvmlLibrary is the file name dlopen looks for.
const nvmlLibrary = "libnvidia-ml.so.1"

// Detect reads the local host: GPUs through NVML (libnvidia-ml, opened at
// run time), NICs, PCIe positions and NUMA nodes from sysfs. A host where
// NVML cannot be loaded or sees no GPU is not an error: the Host has no
// GPUs and NoGPU says why, with dlopen's own message.
func Detect(opt Options) (*Host, error) {
	lib := dl.New(nvmlLibrary, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := lib.Open(); err != nil {
		h, _, err2 := detectBase(opt)
		if err2 != nil {
			return nil, err2
		}
		h.NoGPU = fmt.Sprintf("NVML not available: dlopen %s: %v", nvmlLibrary, err)
		return finish(h)
	}
	defer lib.Close()
	return DetectWith(nvml.New(), opt)
}

// DetectWith is Detect with a given NVML (a simulated server in tests).
func DetectWith(lib NVML, opt Options) (*Host, error) {
	h, s, err := detectBase(opt)
	if err != nil {
		return nil, err
	}
	if r := lib.Init(); r != nvml.SUCCESS {
		h.NoGPU = "NVML init: " + r.Error()
		return finish(h)
	}
	defer lib.Shutdown()
	if v, r := lib.SystemGetDriverVersion(); r == nvml.SUCCESS {
		h.Driver = v
	} else {
		h.Unknown = append(h.Unknown, "driver version: "+r.Error())
	}
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		h.NoGPU = "NVML device count: " + r.Error()
		return finish(h)
	}
	devs := make([]nvml.Device, 0, n)
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			h.Unknown = append(h.Unknown, fmt.Sprintf("GPU%d: handle: %v", i, r))
			continue
		}
		g := readGPU(d, i, s, len(h.NUMA))
		devs = append(devs, d)
		h.GPUs = append(h.GPUs, g)
	}
	if len(h.GPUs) == 0 {
		h.NoGPU = "NVML reports no GPU"
		if n > 0 {
			h.NoGPU = fmt.Sprintf("NVML reports %d GPUs but none could be opened", n)
		}
		return finish(h)
	}
	for i, d := range devs {
		readNVLinks(h, i, d, s)
		h.GPUs[i].P2P = map[int]string{}
		for j, e := range devs {
			if i == j {
				continue
			}
			st, r := d.GetP2PStatus(e, nvml.P2P_CAPS_INDEX_READ)
			if r != nvml.SUCCESS {
				h.GPUs[i].Unknown = append(h.GPUs[i].Unknown, fmt.Sprintf("p2p with GPU%d: %v", h.GPUs[j].Index, r))
				continue
			}
			h.GPUs[i].P2P[h.GPUs[j].Index] = p2pText(st)
		}
	}
	return finish(h)
}

// readGPU reads one GPU's identity, PCIe link, NUMA node and affinity.
func readGPU(d nvml.Device, i int, s sysfs, numaNodes int) GPU {
	g := GPU{Index: i, NUMANode: -1}
	miss := func(what string, r nvml.Return) { g.Unknown = append(g.Unknown, what+": "+r.Error()) }
	if v, r := d.GetIndex(); r == nvml.SUCCESS {
		g.Index = v
	}
	var r nvml.Return
	if g.UUID, r = d.GetUUID(); r != nvml.SUCCESS {
		miss("uuid", r)
	}
	if g.Name, r = d.GetName(); r != nvml.SUCCESS {
		miss("name", r)
	}
	pci, r := d.GetPciInfo()
	if r != nvml.SUCCESS {
		miss("pci bus id", r)
		return g
	}
	g.BusID = NormBusID(cString(pci.BusId[:]))
	pos, numa, link, cpus, why := s.pciDevice(g.BusID, numaNodes)
	g.PCI, g.NUMANode, g.CPUAffinity = pos, numa, cpus
	g.Unknown = append(g.Unknown, why...)
	if v, r := d.GetNumaNodeId(); r == nvml.SUCCESS && v >= 0 {
		g.NUMANode = v
	}
	words := (1024 + 63) / 64
	if m, r := d.GetCpuAffinity(words); r == nvml.SUCCESS {
		mask := make([]uint64, len(m))
		for k, w := range m {
			mask[k] = uint64(w)
		}
		if l := CPUList(mask); l != "" {
			g.CPUAffinity = l
		}
	}
	if g.CPUAffinity == "" {
		g.Unknown = append(g.Unknown, "cpu affinity: neither NVML nor sysfs gives it")
	}
	pcie := func(f func() (int, nvml.Return), fallback int, what string) int {
		if v, r := f(); r == nvml.SUCCESS && v > 0 {
			return v
		}
		if fallback == 0 {
			g.Unknown = append(g.Unknown, what+": not reported")
		}
		return fallback
	}
	g.PCIe = PCIeLink{
		Gen:      pcie(d.GetCurrPcieLinkGeneration, link.Gen, "pcie gen"),
		Width:    pcie(d.GetCurrPcieLinkWidth, link.Width, "pcie width"),
		MaxGen:   pcie(d.GetMaxPcieLinkGeneration, link.MaxGen, "pcie max gen"),
		MaxWidth: pcie(d.GetMaxPcieLinkWidth, link.MaxWidth, "pcie max width"),
	}
	return g
}

// readNVLinks reads GPU i's active NVLinks, grouped by remote device, and
// the per-link rate.
func readNVLinks(h *Host, i int, d nvml.Device, s sysfs) {
	g := &h.GPUs[i]
	byTarget := map[string]int{}
	version := 0
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		st, r := d.GetNvLinkState(l)
		if r != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
			continue // not present, not supported, or down
		}
		pci, r := d.GetNvLinkRemotePciInfo(l)
		if r != nvml.SUCCESS {
			g.Unknown = append(g.Unknown, fmt.Sprintf("nvlink %d remote: %v", l, r))
			continue
		}
		target := NormBusID(cString(pci.BusId[:]))
		v, r := d.GetNvLinkVersion(l)
		if r == nvml.SUCCESS {
			version = int(v)
		}
		k, ok := byTarget[target]
		if !ok {
			k = len(g.NVLinks)
			byTarget[target] = k
			g.NVLinks = append(g.NVLinks, NVLink{Target: target, Remote: remoteKind(h, d, l, target, s), Version: int(v)})
		}
		g.NVLinks[k].Count++
	}
	if len(g.NVLinks) == 0 {
		return
	}
	vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON}}
	if r := d.GetFieldValues(vals); r == nvml.SUCCESS && nvml.Return(vals[0].NvmlReturn) == nvml.SUCCESS {
		if mbs := fieldValue(vals[0]); mbs > 0 {
			g.LinkBW = mbs * 1e6
			return
		}
	}
	if g.LinkBW = NominalNVLinkBW(version); g.LinkBW > 0 {
		g.LinkBWNominal = true
		return
	}
	g.Unknown = append(g.Unknown, fmt.Sprintf("nvlink bandwidth: not reported, and NVLink version %d is not in the table", version))
}

// remoteKind classifies the device at the far end of NVLink l.
func remoteKind(h *Host, d nvml.Device, l int, target string, s sysfs) string {
	if t, r := d.GetNvLinkRemoteDeviceType(l); r == nvml.SUCCESS {
		switch t {
		case nvml.NVLINK_DEVICE_TYPE_GPU:
			return RemoteGPU
		case nvml.NVLINK_DEVICE_TYPE_SWITCH:
			return RemoteNVSwitch
		case nvml.NVLINK_DEVICE_TYPE_IBMNPU:
			return RemoteCPU
		}
	}
	switch {
	case h.GPUByBusID(target) >= 0:
		return RemoteGPU
	case target == fabricTarget:
		return RemoteNVSwitch
	case len(s.pciClass(target)) >= 6 && s.pciClass(target)[:6] == "0x0680":
		return RemoteNVSwitch
	}
	return RemoteUnknown
}

func p2pText(st nvml.GpuP2PStatus) string {
	switch st {
	case nvml.P2P_STATUS_OK:
		return "ok"
	case nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED:
		return "chipset not supported"
	case nvml.P2P_STATUS_GPU_NOT_SUPPORTED:
		return "gpu not supported"
	case nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED:
		return "topology not supported"
	case nvml.P2P_STATUS_DISABLED_BY_REGKEY:
		return "disabled by regkey"
	case nvml.P2P_STATUS_NOT_SUPPORTED:
		return "not supported"
	}
	return "unknown"
}

// fieldValue decodes an NVML field value as a float64.
func fieldValue(v nvml.FieldValue) float64 {
	b := v.Value[:]
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(b))
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.LittleEndian.Uint64(b))
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.LittleEndian.Uint16(b))
	}
	return 0
}

// cString returns the bytes of a NUL-terminated C string.
func cString(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
