package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/flexlink/flexlink/fabric/topo"
)

// legend explains the matrix cells, in nvidia-smi's words.
const legend = `Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
  ?    = Unknown (a PCI position or NUMA node could not be read)
`

// writeReport writes the host's topology as `nvidia-smi topo -m` does (a
// GPU and NIC matrix with CPU and NUMA affinity), then the devices, the
// links between every GPU pair, the rails, and what is unknown.
func writeReport(out io.Writer, h *topo.Host) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "Host %s", orUnknown(h.Hostname))
	if h.Source != "" {
		fmt.Fprintf(b, " (%s)", h.Source)
	}
	if h.Driver != "" {
		fmt.Fprintf(b, ", driver %s", h.Driver)
	}
	b.WriteString("\n\n")
	if len(h.GPUs) == 0 {
		fmt.Fprintf(b, "No GPU: %s\n\n", orUnknown(h.NoGPU))
	}
	if len(h.GPUs)+len(h.NICs) > 0 {
		writeMatrix(b, h)
		b.WriteString("\n" + legend)
	}
	writeDevices(b, h)
	writeLinks(b, h)
	writeRails(b, h)
	writeUnknown(b, h)
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ") // tabwriter pads the last column
	}
	_, err := io.WriteString(out, strings.Join(lines, "\n"))
	return err
}

func gpuName(h *topo.Host, i int) string { return fmt.Sprintf("GPU%d", h.GPUs[i].Index) }
func nicName(n int) string               { return fmt.Sprintf("NIC%d", n) }

func writeMatrix(b *strings.Builder, h *topo.Host) {
	tw := tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
	var head []string
	for i := range h.GPUs {
		head = append(head, gpuName(h, i))
	}
	for n := range h.NICs {
		head = append(head, nicName(n))
	}
	fmt.Fprintf(tw, "\t%s\tCPU Affinity\tNUMA Affinity\t\n", strings.Join(head, "\t"))
	for i, g := range h.GPUs {
		row := []string{gpuName(h, i)}
		for j := range h.GPUs {
			row = append(row, gpuCell(h, i, j))
		}
		for n := range h.NICs {
			row = append(row, h.NICDistance(i, n).String())
		}
		row = append(row, orUnknown(g.CPUAffinity), numOr(g.NUMANode, "?"))
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	for n, c := range h.NICs {
		row := []string{nicName(n)}
		for i := range h.GPUs {
			row = append(row, h.NICDistance(i, n).String())
		}
		for m, d := range h.NICs {
			cell := "X"
			if m != n {
				cell = topo.PCIDistance(c.PCI, d.PCI, c.NUMANode, d.NUMANode).String()
			}
			row = append(row, cell)
		}
		row = append(row, "", numOr(c.NUMANode, "?"))
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	tw.Flush()
	if len(h.NICs) > 0 {
		b.WriteString("\nNIC Legend:\n\n")
		for n, c := range h.NICs {
			fmt.Fprintf(b, "  %s: %s\n", nicName(n), c.Name)
		}
	}
}

// gpuCell is NV<n> when GPUs i and j share NVLinks, their PCI distance
// otherwise.
func gpuCell(h *topo.Host, i, j int) string {
	if i == j {
		return "X"
	}
	if n, _ := h.NVLinkCount(i, j); n > 0 {
		return fmt.Sprintf("NV%d", n)
	}
	return h.GPUDistance(i, j).String()
}

func writeDevices(b *strings.Builder, h *topo.Host) {
	tw := tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
	if len(h.GPUs) > 0 {
		fmt.Fprintf(b, "\nGPUs:\n")
		for i, g := range h.GPUs {
			nv := "no NVLink"
			if links := nvlinkTotal(g); links > 0 {
				nv = fmt.Sprintf("NVLink %d x %s", links, rate(g.LinkBW, "B/s"))
				if g.LinkBWNominal {
					nv += " (nominal)"
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t\n", gpuName(h, i), orUnknown(g.Name), orUnknown(g.BusID), pcieText(g.PCIe), nv)
		}
		tw.Flush()
	}
	if len(h.NICs) > 0 {
		fmt.Fprintf(b, "\nNICs:\n")
		for n, c := range h.NICs {
			kind := "no RDMA"
			if c.RDMA {
				kind = strings.TrimSpace("RDMA " + c.LinkLayer)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", nicName(n), c.Name, orDash(c.Netdev), kind,
				rate(c.Speed, "b/s"), orUnknown(c.BusID), railText(c.Rail))
		}
		tw.Flush()
	}
	if sw := h.NVSwitches(); len(sw) > 0 {
		fmt.Fprintf(b, "\nNVSwitches: %s\n", strings.Join(sw, " "))
	}
}

func nvlinkTotal(g topo.GPU) int {
	n := 0
	for _, l := range g.NVLinks {
		n += l.Count
	}
	return n
}

// writeLinks lists, for every GPU pair, the links a rank on each would use
// (the World's view of one host).
func writeLinks(b *strings.Builder, h *topo.Host) {
	if len(h.GPUs) < 2 {
		return
	}
	members := make([]topo.Member, len(h.GPUs))
	for i, g := range h.GPUs {
		members[i] = topo.Member{Host: h, GPU: g.Index}
	}
	w, err := topo.NewWorld(members)
	if err != nil {
		fmt.Fprintf(b, "\nLinks: %v\n", err)
		return
	}
	b.WriteString("\nLinks between GPUs (nominal bandwidth per direction, latency):\n")
	tw := tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
	for i := range h.GPUs {
		for j := i + 1; j < len(h.GPUs); j++ {
			var parts []string
			for _, l := range w.Links(i, j) {
				parts = append(parts, fmt.Sprintf("%s %s %v", linkName(l), rate(l.Bandwidth, "B/s"), l.Latency))
			}
			fmt.Fprintf(tw, "  %s-%s\t%s\t\n", gpuName(h, i), gpuName(h, j), strings.Join(parts, "\t"))
		}
	}
	tw.Flush()
}

func linkName(l topo.LinkInfo) string {
	if l.Count > 1 {
		return fmt.Sprintf("%s x%d", l.Kind, l.Count)
	}
	return string(l.Kind)
}

// writeRails lists the rails, each with the GPUs whose own NIC it is
// (topo.AssignNICs over the railed NICs: what PXN routes and cross-host
// links use), then every GPU's NICs.
func writeRails(b *strings.Builder, h *topo.Host) {
	railed := topo.RailNICs(h)
	if len(railed) == 0 {
		b.WriteString("\nRails: none (no RDMA NIC)\n")
		return
	}
	own := topo.AssignNICs(h, railed)
	users := map[int][]string{}
	for i, nics := range own {
		for _, n := range nics {
			users[n] = append(users[n], gpuName(h, i))
		}
	}
	sort.SliceStable(railed, func(i, j int) bool { return h.NICs[railed[i]].Rail < h.NICs[railed[j]].Rail })
	b.WriteString("\nRails (NIC, GPUs that send from it):\n")
	for _, n := range railed {
		fmt.Fprintf(b, "  rail %d: %s  %s\n", h.NICs[n].Rail, h.NICs[n].Name, orDash(strings.Join(users[n], " ")))
	}
	if len(h.GPUs) == 0 {
		return
	}
	b.WriteString("\nGPU NICs (own NIC first; distance, rail):\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for i, nics := range own {
		var parts []string
		for _, n := range nics {
			parts = append(parts, fmt.Sprintf("%s %s rail %d", h.NICs[n].Name, h.NICDistance(i, n), h.NICs[n].Rail))
		}
		fmt.Fprintf(tw, "  %s\t%s\t\n", gpuName(h, i), orDash(strings.Join(parts, ", ")))
	}
	tw.Flush()
}

func writeUnknown(b *strings.Builder, h *topo.Host) {
	var lines []string
	for _, u := range h.Unknown {
		lines = append(lines, "host: "+u)
	}
	for i, g := range h.GPUs {
		for _, u := range g.Unknown {
			lines = append(lines, gpuName(h, i)+": "+u)
		}
	}
	for n, c := range h.NICs {
		for _, u := range c.Unknown {
			lines = append(lines, fmt.Sprintf("%s (%s): %s", nicName(n), c.Name, u))
		}
	}
	if len(lines) > 0 {
		b.WriteString("\nNot known:\n  " + strings.Join(lines, "\n  ") + "\n")
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// numOr is n, or none when n is negative (not known, or no rail).
func numOr(n int, none string) string {
	if n < 0 {
		return none
	}
	return fmt.Sprint(n)
}

func railText(r int) string {
	if r < 0 {
		return "no rail"
	}
	return fmt.Sprintf("rail %d", r)
}

func pcieText(l topo.PCIeLink) string {
	part := func(g, w int) string {
		if g == 0 && w == 0 {
			return "?"
		}
		return fmt.Sprintf("gen%s x%s", zeroUnknown(g), zeroUnknown(w))
	}
	return fmt.Sprintf("PCIe %s (max %s)", part(l.Gen, l.Width), part(l.MaxGen, l.MaxWidth))
}

func zeroUnknown(v int) string {
	if v == 0 {
		return "?"
	}
	return fmt.Sprint(v)
}

// rate formats a rate with SI prefixes ("400 Gb/s", "26.6 GB/s"); 0 is
// unknown.
func rate(v float64, unit string) string {
	if v <= 0 {
		return "? " + unit
	}
	for _, p := range []struct {
		div float64
		pfx string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= p.div {
			return fmt.Sprintf("%.4g %s%s", v/p.div, p.pfx, unit)
		}
	}
	return fmt.Sprintf("%.4g %s", v, unit)
}
