package main

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// pngBytes rasterises a scene: filled boxes, lines and curves drawn with a
// square brush, and text in the 7x13 bitmap font of golang.org/x/image.
func pngBytes(s *scene) ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, int(math.Ceil(s.w)), int(math.Ceil(s.h))))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	c := canvas{img}
	c.text(margin, margin-6, s.title, color.Black, false)
	for _, l := range s.lines {
		col, w := hexColor(pcieColor), 1.5
		if l.nvl {
			col, w = hexColor(nvlColor), 3
		}
		if !l.curved {
			c.line(l.x1, l.y1, l.x2, l.y2, w, col)
			continue
		}
		const steps = 48
		px, py := l.x1, l.y1
		for i := 1; i <= steps; i++ {
			t := float64(i) / steps
			qx := (1-t)*(1-t)*l.x1 + 2*(1-t)*t*l.cx + t*t*l.x2
			qy := (1-t)*(1-t)*l.y1 + 2*(1-t)*t*l.cy + t*t*l.y2
			c.line(px, py, qx, qy, w, col)
			px, py = qx, qy
		}
	}
	border := hexColor("#333333")
	for _, r := range s.rects {
		c.fill(r.x, r.y, r.x+r.w, r.y+r.h, border)
		c.fill(r.x+1, r.y+1, r.x+r.w-1, r.y+r.h-1, hexColor(fill(r.kind)))
		top := r.y + r.h/2 - float64(len(r.label))*7 + 11
		for i, t := range r.label {
			c.text(r.x+r.w/2, top+float64(i)*14, t, color.Black, true)
		}
	}
	for _, l := range s.lines {
		if l.label != "" {
			c.text(l.lx, l.ly, l.label, hexColor(nvlColor), true)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

type canvas struct{ img *image.RGBA }

func (c canvas) fill(x0, y0, x1, y1 float64, col color.Color) {
	r := image.Rect(int(math.Round(x0)), int(math.Round(y0)), int(math.Round(x1)), int(math.Round(y1)))
	draw.Draw(c.img, r, image.NewUniform(col), image.Point{}, draw.Src)
}

// line draws a segment with a square brush of side w.
func (c canvas) line(x0, y0, x1, y1, w float64, col color.Color) {
	n := int(math.Ceil(math.Hypot(x1-x0, y1-y0)*2)) + 1
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		x, y := x0+(x1-x0)*t, y0+(y1-y0)*t
		c.fill(x-w/2, y-w/2, x+w/2, y+w/2, col)
	}
}

// text draws s with its baseline at y, starting at x or centred on it.
func (c canvas) text(x, y float64, s string, col color.Color, centre bool) {
	face := basicfont.Face7x13
	d := font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: face}
	if centre {
		x -= float64(d.MeasureString(s).Round()) / 2
	}
	d.Dot = fixed.P(int(math.Round(x)), int(math.Round(y)))
	d.DrawString(s)
}

// hexColor parses "#rrggbb".
func hexColor(s string) color.RGBA {
	v, _ := strconv.ParseUint(s[1:], 16, 32)
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 0xff}
}
