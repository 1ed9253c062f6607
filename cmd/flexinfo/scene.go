package main

import (
	"math"

	"github.com/flexlink/flexlink/fabric/topo"
)

// A scene is the picture laid out: boxes and lines in pixels, drawn by the
// SVG and PNG writers alike.
type scene struct {
	w, h  float64
	title string
	rects []rect
	lines []line
}

type rect struct {
	x, y, w, h float64
	kind       string
	label      []string
}

// line is straight, or a quadratic curve through control point (cx, cy).
type line struct {
	x1, y1, x2, y2 float64
	curved         bool
	cx, cy         float64
	nvl            bool
	label          string
	lx, ly         float64 // label position
}

const (
	boxW, boxH = 160.0, 58.0
	gapX, rowH = 24.0, 110.0
	margin     = 30.0
	titleH     = 30.0
	maxLabel   = 22 // characters that fit in a box at 7 px each
)

// layout places the graph: a row per PCIe depth (CPUs on top, switches
// below), GPUs and NICs on one row in tree order, each parent centred over
// its children; direct GPU-GPU NVLinks as arcs under the devices, and the
// NVSwitches on a row below them.
func layout(h *topo.Host) *scene {
	g := buildGraph(h)
	depth := map[string]int{}
	var leaves []string
	maxDepth := 0
	var walk func(id string, d int)
	walk = func(id string, d int) {
		depth[id] = d
		kids := g.children[id]
		if len(kids) == 0 {
			leaves = append(leaves, id)
			return
		}
		maxDepth = max(maxDepth, d+1)
		for _, c := range kids {
			walk(c, d+1)
		}
	}
	for _, r := range g.roots {
		walk(r, 0)
	}
	x := map[string]float64{}
	for i, l := range leaves {
		x[l] = margin + float64(i)*(boxW+gapX)
	}
	var place func(id string) float64
	place = func(id string) float64 {
		kids := g.children[id]
		if len(kids) == 0 {
			return x[id]
		}
		sum := 0.0
		for _, c := range kids {
			sum += place(c)
		}
		x[id] = sum / float64(len(kids))
		return x[id]
	}
	for _, r := range g.roots {
		place(r)
	}
	y := map[string]float64{}
	for id, d := range depth {
		if len(g.children[id]) == 0 {
			d = maxDepth // devices share the bottom row
		}
		y[id] = margin + titleH + float64(d)*rowH
	}
	width := margin*2 + math.Max(float64(len(leaves)), 1)*(boxW+gapX) - gapX
	devBottom := margin + titleH + float64(maxDepth)*rowH + boxH
	arcDepth := 0.0
	for _, e := range g.edges {
		if e.nvl && g.nodes[g.index[e.b]].kind == kindGPU {
			arcDepth = math.Max(arcDepth, arcDrop(x[e.a], x[e.b]))
		}
	}
	var nvs []string
	for _, n := range g.nodes {
		if n.kind == kindNVSwitch {
			nvs = append(nvs, n.id)
		}
	}
	for i, id := range nvs {
		x[id] = margin + (width-2*margin-boxW)*(float64(i)+0.5)/float64(len(nvs))
		y[id] = devBottom + arcDepth/2 + rowH
	}
	height := devBottom + arcDepth/2 + margin + 20
	if len(nvs) > 0 {
		height = devBottom + arcDepth/2 + rowH + boxH + margin
	}
	s := &scene{w: width, h: height, title: "host " + orUnknown(h.Hostname)}
	for _, n := range g.nodes {
		label := make([]string, len(n.label))
		for i, l := range n.label {
			label[i] = clip(l)
		}
		s.rects = append(s.rects, rect{x: x[n.id], y: y[n.id], w: boxW, h: boxH, kind: n.kind, label: label})
	}
	for _, e := range g.edges {
		ax, ay, bx, by := x[e.a]+boxW/2, y[e.a]+boxH, x[e.b]+boxW/2, y[e.b]
		l := line{x1: ax, y1: ay, x2: bx, y2: by, nvl: e.nvl, label: e.label}
		if e.nvl && g.nodes[g.index[e.b]].kind == kindGPU {
			l.y2 = y[e.b] + boxH
			l.curved, l.cx, l.cy = true, (ax+bx)/2, devBottom+arcDrop(x[e.a], x[e.b])
			l.lx, l.ly = (ax+bx)/2, (ay+l.y2)/4+l.cy/2
		} else {
			l.lx, l.ly = ax+(bx-ax)*0.3, ay+(by-ay)*0.3
		}
		s.lines = append(s.lines, l)
	}
	return s
}

// arcDrop is how far below the devices an arc between x positions a and b
// bends: wider arcs bend deeper, so they do not overlap.
func arcDrop(a, b float64) float64 {
	return 40 + 0.25*math.Abs(a-b)
}

func clip(s string) string {
	if len(s) <= maxLabel {
		return s
	}
	return s[:maxLabel-2] + ".."
}
