package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/flexlink/flexlink/fabric/topo"
)

// Node kinds of the picture.
const (
	kindCPU      = "cpu"
	kindSwitch   = "switch"
	kindGPU      = "gpu"
	kindNIC      = "nic"
	kindNVSwitch = "nvswitch"
)

type gnode struct {
	id, kind string
	label    []string
}

type gedge struct {
	a, b  string
	nvl   bool // NVLink (else PCIe)
	label string
}

// graph is the host as boxes and lines: CPUs (one per NUMA node) at the
// top of PCIe trees of switches, GPUs and NICs as leaves, NVSwitches, and
// NVLinks. The SVG, PNG and Graphviz outputs all draw it.
type graph struct {
	title    string
	nodes    []gnode
	index    map[string]int
	children map[string][]string // PCIe tree, in insertion order
	roots    []string            // CPU nodes
	edges    []gedge
}

func (g *graph) add(id, kind string, label ...string) {
	if _, ok := g.index[id]; ok {
		return
	}
	g.index[id] = len(g.nodes)
	g.nodes = append(g.nodes, gnode{id: id, kind: kind, label: label})
	if kind == kindCPU {
		g.roots = append(g.roots, id)
	}
}

// attach hangs a device below its CPU and PCIe switches.
func (g *graph) attach(h *topo.Host, dev string, numa int, pos topo.PCIPos) {
	parent := cpuID(numa)
	g.add(parent, kindCPU, cpuLabel(h, numa)...)
	for _, s := range pos.Switches {
		id := "sw " + s
		if _, seen := g.index[id]; !seen {
			g.add(id, kindSwitch, "PCIe switch", s)
			g.link(parent, id)
		}
		parent = id
	}
	g.link(parent, dev)
}

func (g *graph) link(parent, child string) {
	for _, c := range g.children[parent] {
		if c == child {
			return
		}
	}
	g.children[parent] = append(g.children[parent], child)
	g.edges = append(g.edges, gedge{a: parent, b: child})
}

func cpuID(numa int) string {
	if numa < 0 {
		return "cpu ?"
	}
	return fmt.Sprintf("cpu %d", numa)
}

func cpuLabel(h *topo.Host, numa int) []string {
	if numa < 0 {
		return []string{"CPU", "NUMA ?"}
	}
	for _, n := range h.NUMA {
		if n.ID == numa && n.CPUs != "" {
			return []string{fmt.Sprintf("CPU / NUMA %d", numa), "cpus " + n.CPUs}
		}
	}
	return []string{fmt.Sprintf("CPU / NUMA %d", numa)}
}

func buildGraph(h *topo.Host) *graph {
	g := &graph{title: orUnknown(h.Hostname), index: map[string]int{}, children: map[string][]string{}}
	for i, d := range h.GPUs {
		id := gpuName(h, i)
		g.add(id, kindGPU, id, shortName(d.Name), d.BusID)
		g.attach(h, id, d.NUMANode, d.PCI)
	}
	for n, c := range h.NICs {
		id := nicName(n)
		l2 := rate(c.Speed, "b/s")
		if c.Rail >= 0 {
			l2 += fmt.Sprintf(" rail %d", c.Rail)
		}
		g.add(id, kindNIC, id+" "+c.Name, l2)
		g.attach(h, id, c.NUMANode, c.PCI)
	}
	sort.Strings(g.roots)
	for _, s := range h.NVSwitches() {
		g.add("nvs "+s, kindNVSwitch, "NVSwitch", s)
	}
	for i, d := range h.GPUs {
		for _, l := range d.NVLinks {
			switch l.Remote {
			case topo.RemoteNVSwitch:
				g.edges = append(g.edges, gedge{a: gpuName(h, i), b: "nvs " + l.Target, nvl: true, label: fmt.Sprintf("NV%d", l.Count)})
			case topo.RemoteGPU:
				if j := h.GPUByBusID(l.Target); j > i {
					n, _ := h.NVLinkCount(i, j)
					g.edges = append(g.edges, gedge{a: gpuName(h, i), b: gpuName(h, j), nvl: true, label: fmt.Sprintf("NV%d", n)})
				}
			}
		}
	}
	return g
}

// shortName drops the vendor prefix of a GPU name ("NVIDIA H200" → "H200").
func shortName(s string) string {
	s = strings.TrimPrefix(s, "NVIDIA ")
	s = strings.TrimPrefix(s, "Tesla ")
	if s == "" {
		return "?"
	}
	return s
}

// dot renders the graph for Graphviz.
func dot(h *topo.Host) string {
	g := buildGraph(h)
	b := &strings.Builder{}
	fmt.Fprintf(b, "graph %q {\n  label=%q;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n", g.title, "host "+g.title)
	for _, n := range g.nodes {
		fmt.Fprintf(b, "  %q [label=%q, fillcolor=%q];\n", n.id, strings.Join(n.label, "\n"), fill(n.kind))
	}
	for _, e := range g.edges {
		if e.nvl {
			fmt.Fprintf(b, "  %q -- %q [label=%q, color=\"#2e8b57\", penwidth=2];\n", e.a, e.b, e.label)
		} else {
			fmt.Fprintf(b, "  %q -- %q [color=\"#777777\"];\n", e.a, e.b)
		}
	}
	b.WriteString("}\n")
	return b.String()
}
