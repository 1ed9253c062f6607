package main

import (
	"fmt"
	"html"
	"strings"
)

// fill is the colour of a node kind's boxes.
func fill(kind string) string {
	switch kind {
	case kindCPU:
		return "#d9d9d9"
	case kindSwitch:
		return "#f5c16c"
	case kindGPU:
		return "#9bd17b"
	case kindNIC:
		return "#8fb8e8"
	case kindNVSwitch:
		return "#c8a2e8"
	}
	return "#ffffff"
}

// nodeKinds lists every node kind.
func nodeKinds() []string { return []string{kindCPU, kindSwitch, kindGPU, kindNIC, kindNVSwitch} }

const (
	pcieColor = "#777777"
	nvlColor  = "#2e8b57"
)

// svg renders a scene as a standalone SVG document.
func svg(s *scene) string {
	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="monospace" font-size="12">`+"\n",
		s.w, s.h, s.w, s.h)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="16" font-weight="bold">%s</text>`+"\n", margin, margin, html.EscapeString(s.title))
	for _, l := range s.lines {
		color, width := pcieColor, 1.5
		if l.nvl {
			color, width = nvlColor, 3
		}
		if l.curved {
			fmt.Fprintf(b, `<path d="M %.1f %.1f Q %.1f %.1f %.1f %.1f" fill="none" stroke="%s" stroke-width="%.1f"/>`+"\n",
				l.x1, l.y1, l.cx, l.cy, l.x2, l.y2, color, width)
		} else {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n",
				l.x1, l.y1, l.x2, l.y2, color, width)
		}
	}
	for _, r := range s.rects {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.0f" rx="6" fill="%s" stroke="#333333"/>`+"\n",
			r.x, r.y, r.w, r.h, fill(r.kind))
		top := r.y + r.h/2 - float64(len(r.label)-1)*7
		for i, t := range r.label {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" dominant-baseline="middle">%s</text>`+"\n",
				r.x+r.w/2, top+float64(i)*14, html.EscapeString(t))
		}
	}
	for _, l := range s.lines {
		if l.label != "" {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s" font-size="11">%s</text>`+"\n",
				l.lx, l.ly, nvlColor, html.EscapeString(l.label))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
