package topo

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// xmlNode is one element of an NCCL topology file, kept generic: NCCL adds
// attributes from release to release, and unknown ones are ignored.
type xmlNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []xmlNode  `xml:",any"`
}

func (n *xmlNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return strings.TrimSpace(a.Value)
		}
	}
	return ""
}

// ParseNCCLXML reads an NCCL_TOPO_FILE (the format of NCCL_TOPO_DUMP_FILE):
// <system> of <cpu numaid affinity> elements holding a tree of <pci busid
// class link_speed link_width> elements; a <pci> holds a <gpu dev sm> with
// <nvlink target count tclass> children, or a <nic> with <net name speed
// port guid> children. Bridges (class 0x0604xx) are PCIe switches; an
// NVLink target of class 0x068000 is an NVSwitch.
//
// What NCCL's format does not carry stays unknown: host name, GPU names and
// UUIDs, current PCIe link state (NCCL records the maximum), and root
// complexes (all PCI trees of one <cpu> share a root named "numa<N>"). The
// NVLink per-link rate is the nominal rate of the version implied by the
// GPU's SM architecture.
func ParseNCCLXML(data []byte) (*Host, error) {
	var root xmlNode
	if err := xml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("nccl topology xml: %w", err)
	}
	if root.XMLName.Local != "system" {
		return nil, fmt.Errorf("nccl topology xml: root element is <%s>, want <system>", root.XMLName.Local)
	}
	p := &xmlParser{h: &Host{GPUs: []GPU{}, NICs: []NIC{}}, nicAt: map[string]int{}}
	for i := range root.Nodes {
		c := &root.Nodes[i]
		if c.XMLName.Local != "cpu" {
			continue
		}
		numa, err := strconv.Atoi(c.attr("numaid"))
		if err != nil {
			numa = -1
		}
		cpus, err := hexMaskList(c.attr("affinity"))
		if err != nil {
			return nil, fmt.Errorf("nccl topology xml: cpu %d: %w", numa, err)
		}
		if numa >= 0 {
			p.h.NUMA = append(p.h.NUMA, NUMANode{ID: numa, CPUs: cpus})
		}
		ctx := xmlCtx{numa: numa, cpus: cpus, pos: PCIPos{Root: fmt.Sprintf("numa%d", numa)}}
		if numa < 0 {
			ctx.pos.Root = ""
		}
		if err := p.walk(c, ctx); err != nil {
			return nil, err
		}
	}
	if len(p.h.GPUs) == 0 {
		p.h.NoGPU = "the topology file lists no GPU"
	}
	return p.h, nil
}

type xmlParser struct {
	h     *Host
	nicAt map[string]int // NIC name → index in h.NICs
}

// xmlCtx is what an element inherits from its ancestors.
type xmlCtx struct {
	numa  int
	cpus  string
	pos   PCIPos
	busID string   // the enclosing <pci>
	link  PCIeLink // its link
}

func (p *xmlParser) walk(n *xmlNode, ctx xmlCtx) error {
	for i := range n.Nodes {
		c := &n.Nodes[i]
		switch c.XMLName.Local {
		case "pci":
			bus := NormBusID(c.attr("busid"))
			if bus == "" {
				return fmt.Errorf("nccl topology xml: <pci> without busid")
			}
			sub := ctx
			sub.busID = bus
			sub.link = xmlLink(c)
			if strings.HasPrefix(strings.ToLower(c.attr("class")), "0x0604") {
				sub.pos.Switches = append(append([]string(nil), ctx.pos.Switches...), bus)
			}
			if err := p.walk(c, sub); err != nil {
				return err
			}
		case "gpu":
			p.gpu(c, ctx)
		case "nic":
			p.nic(c, ctx)
		}
	}
	return nil
}

func xmlLink(c *xmlNode) PCIeLink {
	var l PCIeLink
	if f := strings.Fields(c.attr("link_speed")); len(f) > 0 { // "32.0 GT/s PCIe"
		if gts, err := strconv.ParseFloat(f[0], 64); err == nil {
			l.MaxGen = PCIeGenFromRate(gts)
		}
	}
	if w, err := strconv.Atoi(c.attr("link_width")); err == nil && w > 0 {
		l.MaxWidth = w
	}
	return l
}

func (p *xmlParser) gpu(c *xmlNode, ctx xmlCtx) {
	if ctx.busID == "" || p.h.GPUByBusID(ctx.busID) >= 0 {
		return // outside a <pci>, or a second rank on the same GPU
	}
	dev, err := strconv.Atoi(c.attr("dev"))
	if err != nil {
		dev = len(p.h.GPUs)
	}
	g := GPU{Index: dev, BusID: ctx.busID, NUMANode: ctx.numa, CPUAffinity: ctx.cpus, PCIe: ctx.link, PCI: ctx.pos}
	g.Unknown = []string{"name, uuid, current pcie link, p2p status: not in NCCL topology files"}
	sm, _ := strconv.Atoi(c.attr("sm"))
	version := map[int]int{6: 1, 7: 2, 8: 3, 9: 4, 10: 5}[sm/10]
	for i := range c.Nodes {
		l := &c.Nodes[i]
		if l.XMLName.Local != "nvlink" {
			continue
		}
		count, err := strconv.Atoi(l.attr("count"))
		if err != nil || count <= 0 {
			continue
		}
		remote := RemoteUnknown
		switch cls := strings.ToLower(l.attr("tclass")); {
		case strings.HasPrefix(cls, "0x0680"):
			remote = RemoteNVSwitch
		case strings.HasPrefix(cls, "0x0302"), strings.HasPrefix(cls, "0x0300"):
			remote = RemoteGPU
		case strings.HasPrefix(cls, "0x06"):
			remote = RemoteCPU
		}
		g.NVLinks = append(g.NVLinks, NVLink{Target: NormBusID(l.attr("target")), Remote: remote, Count: count, Version: version})
	}
	if len(g.NVLinks) > 0 {
		if g.LinkBW = NominalNVLinkBW(version); g.LinkBW > 0 {
			g.LinkBWNominal = true
		} else {
			g.Unknown = append(g.Unknown, fmt.Sprintf("nvlink bandwidth: no nominal rate for sm %d", sm))
		}
	}
	p.h.GPUs = append(p.h.GPUs, g)
}

// nic adds the <net> children of a <nic>. A socket NIC that NCCL lists
// under every <cpu> is kept once, with its NUMA node and position unknown.
func (p *xmlParser) nic(c *xmlNode, ctx xmlCtx) {
	for i := range c.Nodes {
		e := &c.Nodes[i]
		if e.XMLName.Local != "net" || e.attr("name") == "" {
			continue
		}
		name := e.attr("name")
		if k, dup := p.nicAt[name]; dup {
			if n := &p.h.NICs[k]; n.NUMANode != ctx.numa || n.BusID != ctx.busID {
				n.NUMANode, n.PCI = -1, PCIPos{}
				n.Unknown = append(n.Unknown, "numa node, pci position: listed under several CPUs")
			}
			continue
		}
		n := NIC{Name: name, BusID: ctx.busID, NUMANode: ctx.numa, PCI: ctx.pos, Rail: -1}
		if mbs, err := strconv.ParseFloat(e.attr("speed"), 64); err == nil && mbs > 0 {
			n.Speed = mbs * 1e6
		} else {
			n.Unknown = append(n.Unknown, "speed: not given")
		}
		n.Port, _ = strconv.Atoi(e.attr("port"))
		guid := strings.ToLower(e.attr("guid"))
		n.RDMA = guid != "" && strings.Trim(strings.TrimPrefix(guid, "0x"), "0") != ""
		if !n.RDMA {
			n.Netdev = name
		}
		p.nicAt[name] = len(p.h.NICs)
		p.h.NICs = append(p.h.NICs, n)
	}
}

// hexMaskList turns NCCL's affinity ("0000ffff,ffffffff": 32-bit words,
// most significant first) into a cpulist. Empty gives "".
func hexMaskList(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	words := strings.Split(s, ",")
	mask := make([]uint64, (len(words)+1)/2)
	for i := range words {
		w, err := strconv.ParseUint(words[len(words)-1-i], 16, 32)
		if err != nil {
			return "", fmt.Errorf("affinity %q: %w", s, err)
		}
		mask[i/2] |= w << (32 * (i % 2))
	}
	return CPUList(mask), nil
}
