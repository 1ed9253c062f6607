package pxn

import "sort"

// MaxRecvs is the most buffers one multi-receive takes (NCCL's
// NCCL_NET_MAX_RECVS, the maxRecvs a net device reports).
const MaxRecvs = 8

// Group is the messages of one all-to-all that travel over one connection:
// from relay Via's NIC to rank Dst. Senders are the ranks whose messages
// it carries (Via itself among them when it sends to Dst directly),
// ascending; the receiver takes them in Receives multi-receives of at most
// MaxRecvs buffers each, the tags naming the senders.
type Group struct {
	Via      int    `json:"via"`
	Dst      int    `json:"dst"`
	DstHost  string `json:"dst_host"`
	NIC      string `json:"nic"`
	Rail     int    `json:"rail"`
	Senders  []int  `json:"senders"`
	Receives int    `json:"receives"`
}

// Aggregation is the multi-receive plan of one all-to-all (every rank
// sends one message to every rank on another host).
type Aggregation struct {
	MaxRecvs int `json:"max_recvs"`
	// Messages is the number of cross-host messages (one per route),
	// Relayed those that take a hop, CrossRail those that leave on a rail
	// other than their destination's (or without rails).
	Messages  int `json:"messages"`
	Relayed   int `json:"relayed"`
	CrossRail int `json:"cross_rail"`
	// Receives is the number of receives posted: the sum over groups.
	Receives int     `json:"receives"`
	Groups   []Group `json:"groups,omitempty"`
}

// Aggregate groups the plan's routes by (Via, destination host, Dst): the
// senders that share one connection into one receiver. maxRecvs <= 0 means
// MaxRecvs. Groups are sorted by (Via, Dst).
func (p *Plan) Aggregate(maxRecvs int) Aggregation {
	if maxRecvs <= 0 {
		maxRecvs = MaxRecvs
	}
	a := Aggregation{MaxRecvs: maxRecvs, Messages: len(p.Routes), Groups: []Group{}}
	type key struct{ via, dst int }
	at := map[key]int{}
	for _, r := range p.Routes {
		if r.Relayed() {
			a.Relayed++
		}
		if !r.Aligned() {
			a.CrossRail++
		}
		k := key{r.Via, r.Dst}
		i, ok := at[k]
		if !ok {
			i = len(a.Groups)
			at[k] = i
			a.Groups = append(a.Groups, Group{Via: r.Via, Dst: r.Dst, DstHost: p.Hosts[r.Dst], NIC: r.NIC, Rail: r.Rail})
		}
		a.Groups[i].Senders = append(a.Groups[i].Senders, r.Src)
	}
	sort.Slice(a.Groups, func(i, j int) bool {
		gi, gj := a.Groups[i], a.Groups[j]
		if gi.Via != gj.Via {
			return gi.Via < gj.Via
		}
		return gi.Dst < gj.Dst
	})
	for i := range a.Groups {
		g := &a.Groups[i]
		sort.Ints(g.Senders)
		g.Receives = (len(g.Senders) + maxRecvs - 1) / maxRecvs
		a.Receives += g.Receives
	}
	return a
}
