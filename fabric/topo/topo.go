// Package topo describes what a host is made of — GPUs, NICs, NVLinks,
// the PCIe tree and NUMA nodes — and what joins every pair of ranks in a
// job. A Host is plain data: it is detected (NVML and sysfs), loaded from a
// file (our JSON/YAML, or NCCL_TOPO_FILE XML) or dumped to one, so that a
// planner bug found on a GPU cluster reproduces on a laptop.
//
// Unknown values. Whatever could not be read is reported as unknown, never
// guessed: strings are empty, counts, generations, widths and speeds are 0,
// NUMA nodes are -1, and the element's Unknown list says what was missing
// and why. Values that are not read but taken from a table of nominal
// figures (an NVLink's per-link rate when NVML does not report it) are
// marked nominal.
package topo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// Host is the topology of one machine.
type Host struct {
	Hostname string `json:"hostname"`
	// Source says where the topology came from: "detect", or the file it
	// was loaded from.
	Source string `json:"source,omitempty"`
	// NoGPU says why GPUs is empty (NVML missing, no device, ...); empty
	// when GPUs were found.
	NoGPU  string     `json:"no_gpu,omitempty"`
	Driver string     `json:"driver,omitempty"` // GPU driver version
	NUMA   []NUMANode `json:"numa,omitempty"`
	GPUs   []GPU      `json:"gpus"`
	NICs   []NIC      `json:"nics"`
	// Rails overrides rail assignment: NIC names in rail order (rail i is
	// Rails[i]); NICs not listed get no rail. FLEXLINK_RAILS overrides it.
	Rails []string `json:"rails,omitempty"`
	// Unknown lists host-level facts that could not be read, with why.
	Unknown []string `json:"unknown,omitempty"`
}

// NUMANode is one NUMA node of the host.
type NUMANode struct {
	ID   int    `json:"id"`
	CPUs string `json:"cpus,omitempty"` // Linux cpulist, e.g. "0-55,112-167"
}

// PCIPos places a device in the PCIe tree. Root names the root complex
// ("pci0000:00"; "numa<N>" for NCCL XML, which groups roots by CPU).
// Switches lists the PCIe switches above the device, CPU side first, each
// named by its upstream port's bus id. This is the level of detail of
// NCCL's topology (one node per switch, downstream ports folded in), which
// is what the PIX/PXB/PHB classes are defined on.
type PCIPos struct {
	Root     string   `json:"root,omitempty"`
	Switches []string `json:"switches,omitempty"`
}

// PCIeLink is a device's PCIe link; 0 means unknown.
type PCIeLink struct {
	Gen      int `json:"gen,omitempty"`
	Width    int `json:"width,omitempty"`
	MaxGen   int `json:"max_gen,omitempty"`
	MaxWidth int `json:"max_width,omitempty"`
}

// Remote kinds of an NVLink.
const (
	RemoteGPU      = "gpu"
	RemoteNVSwitch = "nvswitch"
	RemoteCPU      = "cpu" // IBM NPU / Grace C2C
	RemoteUnknown  = "unknown"
)

// NVLink is a group of NVLinks from one GPU to one remote device.
type NVLink struct {
	Target  string `json:"target"` // remote PCI bus id
	Remote  string `json:"remote"` // RemoteGPU, RemoteNVSwitch, ...
	Count   int    `json:"count"`
	Version int    `json:"version,omitempty"` // NVLink version; 0 unknown
}

// GPU is one GPU.
type GPU struct {
	Index       int      `json:"index"` // NVML / CUDA_VISIBLE_DEVICES-free index
	UUID        string   `json:"uuid,omitempty"`
	Name        string   `json:"name,omitempty"`
	BusID       string   `json:"bus_id"`
	NUMANode    int      `json:"numa_node"`              // -1: unknown
	CPUAffinity string   `json:"cpu_affinity,omitempty"` // cpulist
	PCIe        PCIeLink `json:"pcie"`
	PCI         PCIPos   `json:"pci"`
	NVLinks     []NVLink `json:"nvlinks,omitempty"`
	GPUPeers
	Unknown []string `json:"unknown,omitempty"`
}

// GPUPeers is how a GPU reaches its peers: the speed of its NVLinks and
// the driver's verdict on P2P with each peer. Its fields are GPU's (in
// JSON too).
type GPUPeers struct {
	// LinkBW is one NVLink's bandwidth in bytes/s in one direction (0:
	// unknown). LinkBWNominal is true when it comes from the table of
	// nominal rates by NVLink version rather than from the driver.
	LinkBW        float64 `json:"link_bw,omitempty"`
	LinkBWNominal bool    `json:"link_bw_nominal,omitempty"`
	// P2P maps a peer GPU's index to the driver's P2P read status with it:
	// "ok" or the reason it is not possible. A missing peer is unknown.
	P2P map[int]string `json:"p2p,omitempty"`
}

// NIC is one network interface (a PCI function, and port for RDMA).
type NIC struct {
	// Name is the RDMA device ("mlx5_0") for RDMA NICs, the net device
	// ("eth0") otherwise.
	Name      string  `json:"name"`
	Netdev    string  `json:"netdev,omitempty"` // net device, when there is one
	Port      int     `json:"port,omitempty"`   // RDMA port number
	RDMA      bool    `json:"rdma"`
	LinkLayer string  `json:"link_layer,omitempty"` // InfiniBand, Ethernet
	Speed     float64 `json:"speed,omitempty"`      // bits/s; 0 unknown
	BusID     string  `json:"bus_id,omitempty"`
	NUMANode  int     `json:"numa_node"` // -1: unknown
	PCI       PCIPos  `json:"pci"`
	// Rail is derived (AssignRails), not read: NICs with the same rail on
	// different hosts share a leaf switch. -1: none.
	Rail    int      `json:"rail"`
	Unknown []string `json:"unknown,omitempty"`
}

// UnmarshalJSON presets the values whose zero is meaningful (NUMA node 0)
// to unknown, so a field missing from a file stays unknown.
func (g *GPU) UnmarshalJSON(b []byte) error {
	type plain GPU
	p := plain{NUMANode: -1}
	if err := strictJSON(b, &p); err != nil {
		return err
	}
	*g = GPU(p)
	return nil
}

// UnmarshalJSON presets NUMA node and rail to unknown / none.
func (n *NIC) UnmarshalJSON(b []byte) error {
	type plain NIC
	p := plain{NUMANode: -1, Rail: -1}
	if err := strictJSON(b, &p); err != nil {
		return err
	}
	*n = NIC(p)
	return nil
}

// strictJSON decodes, rejecting fields the type does not have (a typo in a
// hand-written topology file must not pass as "unknown").
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// GPUByBusID returns the index in h.GPUs of the GPU at busID, or -1.
func (h *Host) GPUByBusID(busID string) int {
	for i := range h.GPUs {
		if h.GPUs[i].BusID == busID {
			return i
		}
	}
	return -1
}

// NVSwitches returns the bus ids of the NVSwitches the host's GPUs link
// to, sorted.
func (h *Host) NVSwitches() []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range h.GPUs {
		for _, l := range g.NVLinks {
			if l.Remote == RemoteNVSwitch && !seen[l.Target] {
				seen[l.Target] = true
				out = append(out, l.Target)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Validate checks the invariants planners rely on: unique GPU indexes and
// bus ids, NVLink targets that name a GPU of the host when they say so.
func (h *Host) Validate() error {
	idx := map[int]bool{}
	bus := map[string]bool{}
	for _, g := range h.GPUs {
		if idx[g.Index] {
			return fmt.Errorf("host %s: GPU index %d appears twice", h.Hostname, g.Index)
		}
		idx[g.Index] = true
		if g.BusID != "" && bus[g.BusID] {
			return fmt.Errorf("host %s: GPU bus id %s appears twice", h.Hostname, g.BusID)
		}
		bus[g.BusID] = true
	}
	for _, g := range h.GPUs {
		for _, l := range g.NVLinks {
			if l.Count <= 0 {
				return fmt.Errorf("host %s: GPU%d: nvlink to %s has count %d", h.Hostname, g.Index, l.Target, l.Count)
			}
			if l.Remote == RemoteGPU && !bus[l.Target] {
				return fmt.Errorf("host %s: GPU%d: nvlink target %s is not a GPU of this host", h.Hostname, g.Index, l.Target)
			}
		}
	}
	nics := map[string]bool{}
	for _, n := range h.NICs {
		if n.Name == "" {
			return fmt.Errorf("host %s: a NIC has no name", h.Hostname)
		}
		if nics[n.Name] {
			return fmt.Errorf("host %s: NIC %s appears twice", h.Hostname, n.Name)
		}
		nics[n.Name] = true
	}
	return nil
}
