package pxn

import (
	"slices"

	"github.com/flexlink/flexlink/fabric/topo"
)

// MaxRings caps the rings Rings plans (one per rail, as NCCL opens a
// channel per NIC; the multi-link layer balances at most 8 links too).
const MaxRings = 8

// Rings plans the rings (channels) of the ring collectives (allreduce,
// reduce-scatter, allgather; collectives.Config.Rings) so that every rail
// carries a share of the cross-host bytes when each rank sends from its
// own NIC (FLEXLINK_PXN set: World.RankNICs' first NIC).
//
// One ring in rank order crosses between hosts once per host, always from
// the same rank: with PXN that is one NIC per host, whatever the host has.
// NCCL instead opens a channel per NIC and builds each channel's ring so
// that it enters and leaves the host on that channel's NIC. Rings does the
// same with the ranks' own NICs: with R rails in the job it returns R
// rings, ring c visiting the hosts in order (first rank's host first) and
// each host's ranks contiguously. Between host i and host i+1 ring c
// crosses on rail (c+i) mod R: host i's last rank on that ring owns a NIC
// on that rail, and so does host i+1's first. Over the R rings, each host
// then sends (and receives) once on every rail, and every hop is
// rail-aligned: it stays on one leaf switch. Where a host has no rank on
// the wanted rail, or must enter and leave through one rank (one rank
// on the rail and others elsewhere, at an odd number of hosts), the hop
// takes whichever rank is left and crosses rails.
//
// When the ranks span fewer than two hosts or fewer than two rails there
// is nothing to spread: one ring in rank order, [[0 1 ... n-1]]. The same
// World gives the same rings on every rank.
func Rings(w *topo.World) [][]int {
	n := w.Size()
	order := func() [][]int {
		ring := make([]int, n)
		for i := range ring {
			ring[i] = i
		}
		return [][]int{ring}
	}
	var hostNames []string
	byHost := map[string][]int{}
	rail := make([]int, n)
	var rails []int
	for r := range n {
		m := w.Member(r)
		name := m.Host.Hostname
		if _, ok := byHost[name]; !ok {
			hostNames = append(hostNames, name)
		}
		byHost[name] = append(byHost[name], r)
		rail[r] = ownRail(w, r)
		if rail[r] >= 0 && !slices.Contains(rails, rail[r]) {
			rails = append(rails, rail[r])
		}
	}
	if len(hostNames) < 2 || len(rails) < 2 {
		return order()
	}
	slices.Sort(rails)
	rails = rails[:min(len(rails), MaxRings)]
	nh := len(hostNames)
	out := make([][]int, len(rails))
	for c := range rails {
		cross := func(i int) int { return rails[(c+i)%len(rails)] } // the rail between host i and i+1
		ring := make([]int, 0, n)
		for i, name := range hostNames {
			ring = append(ring, hostOrder(byHost[name], rail, cross((i+nh-1)%nh), cross(i))...)
		}
		out[c] = ring
	}
	return out
}

// hostOrder orders one host's ranks for a ring that enters the host on
// rail in and leaves it on rail out: first the first rank on rail in, last
// the last other rank on rail out, the rest between them in rank order.
// A host of one rank enters and leaves through it.
func hostOrder(ranks, rail []int, in, out int) []int {
	if len(ranks) == 1 {
		return slices.Clone(ranks)
	}
	first, last := -1, -1
	for _, r := range ranks {
		if rail[r] == in {
			first = r
			break
		}
	}
	for _, r := range slices.Backward(ranks) {
		if rail[r] == out && r != first {
			last = r
			break
		}
	}
	if first < 0 { // no rank on rail in: the first rank left
		first = ranks[0]
		if first == last {
			first = ranks[1]
		}
	}
	if last < 0 { // no other rank on rail out: the last rank left
		last = ranks[len(ranks)-1]
		if last == first {
			last = ranks[len(ranks)-2]
		}
	}
	o := []int{first}
	for _, r := range ranks {
		if r != first && r != last {
			o = append(o, r)
		}
	}
	return append(o, last)
}

// RingHop is one cross-host step of a ring: Src sends to Dst, their own
// NICs on Rail and DstRail (-1: none); Aligned when they are one rail.
type RingHop struct {
	Src     int  `json:"src"`
	Dst     int  `json:"dst"`
	Rail    int  `json:"rail"`
	DstRail int  `json:"dst_rail"`
	Aligned bool `json:"aligned"`
}

// RingHops lists ring's steps between hosts, in ring order.
func RingHops(w *topo.World, ring []int) []RingHop {
	var out []RingHop
	for i, src := range ring {
		dst := ring[(i+1)%len(ring)]
		if w.SameHost(src, dst) {
			continue
		}
		h := RingHop{Src: src, Dst: dst, Rail: ownRail(w, src), DstRail: ownRail(w, dst)}
		h.Aligned = h.Rail >= 0 && h.Rail == h.DstRail
		out = append(out, h)
	}
	return out
}

// ownRail is the rail of rank r's first own NIC, -1 for none.
func ownRail(w *topo.World, r int) int {
	nics := w.RankNICs(r)
	if len(nics) == 0 {
		return -1
	}
	return w.Member(r).Host.NICs[nics[0]].Rail
}
