//go:build cgo && !nonvml

package topo

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

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

// fabricTarget is the all-ones remote bus id NVML gives when it has none:
// for links into an NVLink fabric whose switches are not visible as PCI
// devices (B200, GB200), and for direct links in some VMs (the 2xH200
// machine of docs/h200x2-topology.txt).
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
	unres := make([][]nvLink, len(devs))
	for i, d := range devs {
		unres[i] = readNVLinks(h, i, d, s)
	}
	resolveUnknownRemotes(h, devs, unres)
	for i, d := range devs {
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

// nvLink is one active NVLink as NVML reports it.
type nvLink struct {
	target  string // normalised remote bus id; invalidBusID when NVML gives none
	kind    string // remote kind from the device type or bus id
	typed   string // remote kind from the device type alone ("" when not reported)
	version int    // NVLink generation, 0 unknown
}

// readNVLinks reads GPU i's active NVLinks, grouped by remote device, and
// the per-link rate. Links whose remote bus id NVML does not give are
// returned (unresolved, to be placed by resolveUnknownRemotes once every
// GPU is read); the others go to h.GPUs[i].NVLinks.
func readNVLinks(h *Host, i int, d nvml.Device, s sysfs) (unresolved []nvLink) {
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
		lv := 0
		if v, r := d.GetNvLinkVersion(l); r == nvml.SUCCESS {
			lv = nvlinkGenFromVersion(v)
			version = lv
		}
		typed := remoteType(d, l)
		if invalidBusID(target, pci) {
			unresolved = append(unresolved, nvLink{target: fabricTarget, typed: typed, version: lv})
			continue
		}
		k, ok := byTarget[target]
		if !ok {
			k = len(g.NVLinks)
			byTarget[target] = k
			g.NVLinks = append(g.NVLinks, NVLink{Target: target, Remote: remoteKind(h, typed, target, s), Version: lv})
		}
		g.NVLinks[k].Count++
	}
	if len(g.NVLinks) == 0 && len(unresolved) == 0 {
		return nil
	}
	vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON}}
	if r := d.GetFieldValues(vals); r == nvml.SUCCESS && nvml.Return(vals[0].NvmlReturn) == nvml.SUCCESS {
		if mbs := fieldValue(vals[0]); mbs > 0 {
			g.LinkBW = mbs * 1e6
			return unresolved
		}
	}
	gen := gpuNVLinkGen(d, g.Name)
	if gen == 0 {
		gen = version
	}
	if g.LinkBW = NominalNVLinkBW(gen); g.LinkBW > 0 {
		g.LinkBWNominal = true
		return unresolved
	}
	g.Unknown = append(g.Unknown, fmt.Sprintf("nvlink bandwidth: not reported, and neither the GPU (%q) nor NVLink version %d is in the table", g.Name, version))
	return unresolved
}

// nvlinkGenFromVersion maps what nvmlDeviceGetNvLinkVersion returns to an
// NVLink generation. Recent drivers (R560 on, e.g. 580 on the H200 machine,
// which returns 6) answer with nvmlNvlinkVersion_t (NVLINK_VERSION_4_0 =
// 6, 5_0 = 7, 3_1 = 5); older ones with the generation itself (1-4). Values
// 1-4 are read as generations: gpuNVLinkGen, by architecture, settles the
// rate where it matters.
func nvlinkGenFromVersion(v uint32) int {
	switch nvml.NvlinkVersion(v) {
	case nvml.NVLINK_VERSION_3_1:
		return 3
	case nvml.NVLINK_VERSION_4_0:
		return 4
	case nvml.NVLINK_VERSION_5_0:
		return 5
	}
	if v >= 1 && v <= 4 {
		return int(v)
	}
	return 0
}

// gpuNVLinkGen is the NVLink generation of a GPU by name, else by NVML's
// architecture; 0 when neither tells.
func gpuNVLinkGen(d nvml.Device, name string) int {
	n := strings.ToUpper(name)
	for _, t := range []struct {
		gen   int
		names []string
	}{
		{5, []string{"B100", "B200", "B300", "GB200", "GB300"}},
		{4, []string{"H100", "H200", "H800", "H20", "GH200"}},
		{3, []string{"A100", "A800"}},
		{2, []string{"V100"}},
		{1, []string{"P100"}},
	} {
		for _, m := range t.names {
			if strings.Contains(n, m) {
				return t.gen
			}
		}
	}
	if a, r := d.GetArchitecture(); r == nvml.SUCCESS {
		switch a {
		case nvml.DEVICE_ARCH_PASCAL:
			return 1
		case nvml.DEVICE_ARCH_VOLTA:
			return 2
		case nvml.DEVICE_ARCH_AMPERE:
			return 3
		case nvml.DEVICE_ARCH_HOPPER:
			return 4
		case nvml.DEVICE_ARCH_BLACKWELL:
			return 5
		}
	}
	return 0
}

// invalidBusID reports whether NVML gave no usable remote bus id: empty,
// all ones (ffffffff:ff:ff.0, as a VM's driver or an NVLink fabric whose
// switches are not PCI devices answer), or out of PCI's range.
func invalidBusID(target string, pci nvml.PciInfo) bool {
	if target == "" || target == fabricTarget || pci.Domain == 0xffffffff || pci.Bus == 0xffffffff {
		return true
	}
	dom, rest, ok := strings.Cut(target, ":")
	if !ok || len(dom) > 4 {
		return true
	}
	var bus, dev, fn uint
	if _, err := fmt.Sscanf(rest, "%x:%x.%x", &bus, &dev, &fn); err != nil {
		return true
	}
	return bus > 0xff || dev > 0x1f || fn > 7 || (bus == 0xff && dev == 0x1f && fn == 7)
}

// resolveUnknownRemotes places the links whose remote bus id NVML did not
// give (unres[i] for h.GPUs[i]). When all of a GPU's links are such, they
// are direct links to one peer GPU when the host has exactly two GPUs with
// the same number of them, or when NVML's NVLink P2P capability names one
// peer only (in both directions). Otherwise they go to an NVLink fabric
// when the driver says the remote is a switch (B200 and GB200, whose
// switches are not PCI devices), and stay unknown remotes else.
func resolveUnknownRemotes(h *Host, devs []nvml.Device, unres [][]nvLink) {
	allUnknown := func(i int) bool { return len(unres[i]) > 0 && len(h.GPUs[i].NVLinks) == 0 }
	nvPeers := func(i int) []int {
		var out []int
		for j := range devs {
			if j == i {
				continue
			}
			if st, r := devs[i].GetP2PStatus(devs[j], nvml.P2P_CAPS_INDEX_NVLINK); r == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
				out = append(out, j)
			}
		}
		return out
	}
	peer := func(i int) int {
		if !allUnknown(i) {
			return -1
		}
		if len(h.GPUs) == 2 {
			j := 1 - i
			if allUnknown(j) && len(unres[j]) == len(unres[i]) {
				return j
			}
		}
		if p := nvPeers(i); len(p) == 1 && allUnknown(p[0]) {
			if q := nvPeers(p[0]); len(q) == 1 && q[0] == i {
				return p[0]
			}
		}
		return -1
	}
	peers := make([]int, len(h.GPUs))
	for i := range h.GPUs {
		peers[i] = peer(i)
	}
	for i, links := range unres {
		g := &h.GPUs[i]
		if len(links) == 0 {
			continue
		}
		version := links[0].version
		for _, l := range links[1:] {
			if l.version != version {
				version = 0
			}
		}
		if j := peers[i]; j >= 0 {
			g.NVLinks = append(g.NVLinks, NVLink{Target: h.GPUs[j].BusID, Remote: RemoteGPU, Count: len(links), Version: version})
			continue
		}
		byKind := map[string]int{}
		for _, l := range links {
			k := RemoteUnknown
			if l.typed == RemoteNVSwitch {
				k = RemoteNVSwitch
			}
			if _, ok := byKind[k]; !ok {
				byKind[k] = len(g.NVLinks)
				g.NVLinks = append(g.NVLinks, NVLink{Target: fabricTarget, Remote: k, Version: l.version})
			}
			g.NVLinks[byKind[k]].Count++
			if l.version != g.NVLinks[byKind[k]].Version {
				g.NVLinks[byKind[k]].Version = 0
			}
		}
		if n, ok := byKind[RemoteUnknown]; ok {
			g.Unknown = append(g.Unknown, fmt.Sprintf("nvlink remote: %d links with no remote bus id, and no single peer GPU to assign them to", g.NVLinks[n].Count))
		}
	}
}

// remoteType is the remote kind of NVLink l by the device type NVML
// reports, "" when it reports none.
func remoteType(d nvml.Device, l int) string {
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
	return ""
}

// remoteKind classifies the device at a valid remote bus id, by the
// device type NVML reported (typed) when it did.
func remoteKind(h *Host, typed, target string, s sysfs) string {
	switch {
	case typed == RemoteGPU && h.GPUByBusID(target) < 0:
		return RemoteUnknown // not a GPU of this host: Validate would reject it
	case typed != "":
		return typed
	case h.GPUByBusID(target) >= 0:
		return RemoteGPU
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
