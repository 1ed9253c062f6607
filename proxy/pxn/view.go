package pxn

// View is the part of a plan one rank's proxy acts on.
type View struct {
	Rank int
	// Sends are the routes of the rank's own messages (Src == Rank), by
	// destination: where each goes first.
	Sends []Route
	// Relays are the connections the rank drives (Via == Rank): one per
	// destination, with the local senders whose messages it carries (the
	// rank itself among them when it also sends there directly).
	Relays []Group
	// Recvs are the connections into the rank (Dst == Rank), by relay:
	// each takes Group.Receives multi-receives per all-to-all.
	Recvs []Group
}

// View picks out rank r's part of the plan, with the groups of
// Aggregate(maxRecvs). Every slice is sorted as in the plan and owned by
// the caller.
func (p *Plan) View(r, maxRecvs int) View {
	v := View{Rank: r}
	for _, rt := range p.Routes {
		if rt.Src == r {
			v.Sends = append(v.Sends, rt)
		}
	}
	for _, g := range p.Aggregate(maxRecvs).Groups {
		if g.Via == r {
			v.Relays = append(v.Relays, g)
		}
		if g.Dst == r {
			v.Recvs = append(v.Recvs, g)
		}
	}
	return v
}
