package pxn

import (
	"testing"

	"github.com/flexlink/flexlink/fabric/topo"
)

// nearRailed returns the NICs of h with a rail at the best known PCI
// distance from GPU position g (nil when no distance is known).
func nearRailed(h *topo.Host, g int) map[string]bool {
	best := topo.DistUnknown
	out := map[string]bool{}
	for n, c := range h.NICs {
		d := h.NICDistance(g, n)
		if c.Rail < 0 || d == topo.DistUnknown {
			continue
		}
		if best == topo.DistUnknown || d < best {
			best, out = d, map[string]bool{}
		}
		if d == best {
			out[c.Name] = true
		}
	}
	if best == topo.DistUnknown {
		return nil
	}
	return out
}

func gpuPos(m topo.Member) int {
	for i, g := range m.Host.GPUs {
		if g.Index == m.GPU {
			return i
		}
	}
	return -1
}

func railNIC(h *topo.Host, rail int) (topo.NIC, bool) {
	for _, c := range h.NICs {
		if rail >= 0 && c.Rail == rail {
			return c, true
		}
	}
	return topo.NIC{}, false
}

// nvlinked reports whether ranks a and b (one host) have NVLink between
// their GPUs.
func nvlinked(w *topo.World, a, b int) bool {
	ga, gb := gpuPos(w.Member(a)), gpuPos(w.Member(b))
	if ga < 0 || gb < 0 {
		return false
	}
	n, _ := w.Member(a).Host.NVLinkCount(ga, gb)
	return n > 0
}

// checkPlan asserts what must hold of any plan, from the topology alone:
// exactly one route per cross-host pair and none within a host; relays on
// the sender's host, reached over NVLink for GPU buffers, sending from
// their own NIC on the destination's rail; no relay at level 0; and at
// level 2 a message leaves off its destination's rail only where no
// reachable rank of its host has a NIC on that rail.
func checkPlan(t *testing.T, w *topo.World, opt Options, p *Plan) {
	t.Helper()
	n := w.Size()
	seen := map[[2]int]bool{}
	for i, r := range p.Routes {
		if i > 0 {
			q := p.Routes[i-1]
			if q.Src > r.Src || (q.Src == r.Src && q.Dst >= r.Dst) {
				t.Errorf("routes not sorted at %d: %+v after %+v", i, r, q)
			}
		}
		if seen[[2]int{r.Src, r.Dst}] {
			t.Errorf("two routes %d->%d", r.Src, r.Dst)
		}
		seen[[2]int{r.Src, r.Dst}] = true
		if got, ok := p.Route(r.Src, r.Dst); !ok || got != r {
			t.Errorf("Route(%d, %d) = %+v, %v; want %+v", r.Src, r.Dst, got, ok, r)
		}
		checkRoute(t, w, opt, r)
	}
	for s := range n {
		for d := range n {
			if want := !w.SameHost(s, d); seen[[2]int{s, d}] != want {
				t.Errorf("route %d->%d present %v, want %v", s, d, seen[[2]int{s, d}], want)
			}
		}
	}
}

func checkRoute(t *testing.T, w *topo.World, opt Options, r Route) {
	t.Helper()
	src, dst := w.Member(r.Src), w.Member(r.Dst)
	hs := src.Host
	if r.Src < 0 || r.Dst < 0 || r.Via < 0 || r.Via >= w.Size() || !w.SameHost(r.Src, r.Via) {
		t.Errorf("%+v: via is not on src's host %s", r, hs.Hostname)
		return
	}
	if c, ok := railNIC(hs, r.Rail); r.NIC != "" && (!ok || c.Name != r.NIC) {
		t.Errorf("%+v: NIC is not src host's NIC on rail %d", r, r.Rail)
	}
	if g := gpuPos(dst); g >= 0 {
		if near := nearRailed(dst.Host, g); near != nil {
			c, ok := railNIC(dst.Host, r.DstRail)
			if !ok || !near[c.Name] {
				t.Errorf("%+v: dst rail %d is not the rail of a NIC nearest dst's GPU %v", r, r.DstRail, near)
			}
		}
	}
	if opt.Level == Off && r.Relayed() {
		t.Errorf("%+v: relayed at level 0", r)
	}
	if r.Relayed() {
		if !r.Aligned() {
			t.Errorf("%+v: relayed but not on dst's rail", r)
		}
		want := map[Mem]string{GPUMem: HopNVLink, HostMem: HopShm}[opt.Mem]
		if r.Hop != want {
			t.Errorf("%+v: hop %q, want %q", r, r.Hop, want)
		}
		if opt.Mem == GPUMem && !nvlinked(w, r.Src, r.Via) {
			t.Errorf("%+v: relay without NVLink between the GPUs", r)
		}
		if g := gpuPos(w.Member(r.Via)); g >= 0 {
			if near := nearRailed(hs, g); near != nil && !near[r.NIC] {
				t.Errorf("%+v: relay's nearest NICs are %v, not %s", r, near, r.NIC)
			}
		}
		return
	}
	if r.Hop != "" {
		t.Errorf("%+v: direct route with hop %q", r, r.Hop)
	}
	if opt.Level != Rail || r.Aligned() || r.DstRail < 0 {
		return
	}
	c, ok := railNIC(hs, r.DstRail)
	if !ok {
		return
	}
	for v := range w.Size() {
		if v == r.Src || !w.SameHost(v, r.Src) || (opt.Mem == GPUMem && !nvlinked(w, r.Src, v)) {
			continue
		}
		if g := gpuPos(w.Member(v)); g >= 0 && nearRailed(hs, g)[c.Name] {
			t.Errorf("%+v: cross-rail although rank %d (NIC %s on rail %d) is reachable", r, v, c.Name, r.DstRail)
		}
	}
}
