package topo

// Distance is how far apart two PCI devices are, in the classes of
// `nvidia-smi topo -m`, nearest first.
type Distance int

const (
	// DistUnknown: a position or NUMA node needed to tell is unknown.
	DistUnknown Distance = iota
	// PIX: under the same PCIe switch (at most one switch traversed).
	PIX
	// PXB: through several PCIe switches, without the host bridge.
	PXB
	// PHB: through the PCIe host bridge of one root complex (a CPU).
	PHB
	// NODE: between root complexes of one NUMA node.
	NODE
	// SYS: across the SMP interconnect between NUMA nodes.
	SYS
)

func (d Distance) String() string {
	switch d {
	case PIX:
		return "PIX"
	case PXB:
		return "PXB"
	case PHB:
		return "PHB"
	case NODE:
		return "NODE"
	case SYS:
		return "SYS"
	}
	return "?"
}

// PCIDistance classifies the path between two devices from their PCIe
// positions and NUMA nodes (-1: unknown).
//
// Different root complexes are NODE when both NUMA nodes are known and
// equal, SYS when known and different, unknown otherwise. Within one root
// complex: PIX when both hang directly off the same lowest switch, PXB when
// they share a switch but not the lowest one, PHB when they share none.
func PCIDistance(a, b PCIPos, numaA, numaB int) Distance {
	if a.Root == "" || b.Root == "" {
		return DistUnknown
	}
	if a.Root != b.Root {
		switch {
		case numaA < 0 || numaB < 0:
			return DistUnknown
		case numaA == numaB:
			return NODE
		default:
			return SYS
		}
	}
	common := 0
	for common < len(a.Switches) && common < len(b.Switches) && a.Switches[common] == b.Switches[common] {
		common++
	}
	switch {
	case common == 0:
		return PHB
	case common == len(a.Switches) && common == len(b.Switches):
		return PIX
	default:
		return PXB
	}
}

// GPUDistance is the PCI distance between GPUs i and j (indexes into
// h.GPUs).
func (h *Host) GPUDistance(i, j int) Distance {
	a, b := &h.GPUs[i], &h.GPUs[j]
	return PCIDistance(a.PCI, b.PCI, a.NUMANode, b.NUMANode)
}

// NICDistance is the PCI distance between GPU i and NIC n (indexes into
// h.GPUs and h.NICs).
func (h *Host) NICDistance(i, n int) Distance {
	g, c := &h.GPUs[i], &h.NICs[n]
	return PCIDistance(g.PCI, c.PCI, g.NUMANode, c.NUMANode)
}

// NVLinkCount is the number of NVLinks that join GPUs i and j (indexes
// into h.GPUs), and whether any of them pass through NVSwitches.
//
// Direct links count once each. Through switches, each switch carries
// min(links of i to it, links of j to it), as nvidia-smi counts NV18
// between two H100s of an HGX board whose 18 links are spread 5/4/4/5 over
// four switches. Links to an unknown remote are not counted.
func (h *Host) NVLinkCount(i, j int) (count int, viaSwitch bool) {
	if i == j {
		return 0, false
	}
	a, b := &h.GPUs[i], &h.GPUs[j]
	toSwitch := map[string]int{}
	for _, l := range b.NVLinks {
		if l.Remote == RemoteNVSwitch {
			toSwitch[l.Target] += l.Count
		}
	}
	for _, l := range a.NVLinks {
		switch {
		case l.Remote == RemoteGPU && l.Target == b.BusID:
			count += l.Count
		case l.Remote == RemoteNVSwitch && toSwitch[l.Target] > 0:
			count += min(l.Count, toSwitch[l.Target])
			toSwitch[l.Target] = 0 // a switch listed twice is counted once
			viaSwitch = true
		}
	}
	return count, viaSwitch
}

// NearestNICs returns the indexes of the NICs closest to GPU i by PCI
// distance (all at the same, best known distance; nil when none is known),
// preferring RDMA NICs when rdmaFirst.
func (h *Host) NearestNICs(i int, rdmaFirst bool) []int {
	best, bestRDMA := DistUnknown, false
	var out []int
	for n := range h.NICs {
		d := h.NICDistance(i, n)
		if d == DistUnknown {
			continue
		}
		r := rdmaFirst && h.NICs[n].RDMA
		switch {
		case out == nil, r && !bestRDMA, r == bestRDMA && d < best:
			best, bestRDMA, out = d, r, []int{n}
		case r == bestRDMA && d == best:
			out = append(out, n)
		}
	}
	return out
}
