package pxn

import "testing"

// TestViews: the ranks' views partition the plan: every route is in its
// sender's Sends, every group in its relay's Relays and its receiver's
// Recvs, exactly once.
func TestViews(t *testing.T) {
	for _, c := range planCases() {
		w := c.w(t)
		p, err := Compute(w, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		a := p.Aggregate(0)
		sends, relays, recvs := 0, 0, 0
		for r := range w.Size() {
			v := p.View(r, 0)
			for _, s := range v.Sends {
				if got, ok := p.Route(s.Src, s.Dst); s.Src != r || !ok || got != s {
					t.Errorf("%s: rank %d sends %+v", c.name, r, s)
				}
			}
			for _, g := range v.Relays {
				if g.Via != r {
					t.Errorf("%s: rank %d relays %+v", c.name, r, g)
				}
			}
			for _, g := range v.Recvs {
				if g.Dst != r {
					t.Errorf("%s: rank %d receives %+v", c.name, r, g)
				}
			}
			sends, relays, recvs = sends+len(v.Sends), relays+len(v.Relays), recvs+len(v.Recvs)
		}
		if sends != len(p.Routes) || relays != len(a.Groups) || recvs != len(a.Groups) {
			t.Errorf("%s: views hold %d sends, %d relays, %d recvs; want %d routes, %d groups", c.name, sends, relays, recvs, len(p.Routes), len(a.Groups))
		}
	}
}
