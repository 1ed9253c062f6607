package topo

import "sort"

// AssignNICs gives every GPU of h its own NICs, as NCCL spreads GPUs over
// the NICs nearest them. cands are the NICs to hand out (indexes into
// h.NICs, in the order ties are broken: the host's NIC order); the result
// has one entry per position in h.GPUs: the indexes of that GPU's NICs,
// its primary NIC (the one it sends from) first; nil when cands is empty.
//
// The rules, in order:
//
//  1. A GPU's candidates are the NICs of cands at its best known PCI
//     distance: the same PCIe switch (PIX), then switches that meet below
//     the host bridge (PXB), then the host bridge (PHB), then the NUMA node
//     (NODE), then anywhere (SYS).
//  2. GPUs choose their primary NIC nearest first (PIX GPUs before PHB
//     ones), the GPUs with fewer candidates first among those, then by GPU
//     index; each takes the candidate with the fewest GPUs on it so far,
//     the first in cands order on a tie. GPUs that share a set of n
//     candidates thus take n distinct NICs, and a NIC is shared only when
//     there are fewer NICs than GPUs at that distance (2 GPUs and 1 NIC
//     under a switch).
//  3. A candidate no GPU took as primary (more NICs than GPUs at that
//     distance: 1 GPU and 2 NICs under a switch) is added to the GPU among
//     those it is a candidate of that has the fewest NICs so far (the lowest
//     GPU index on a tie), so every NIC near a GPU is used. A NIC that is
//     no GPU's candidate is left out.
//  4. A GPU with no known distance to any candidate (a topology file
//     without PCI positions) takes the candidate with the fewest GPUs, as
//     in rule 2, after the GPUs with known distances.
//
// The result depends only on h and cands: every rank computes the same.
func AssignNICs(h *Host, cands []int) [][]int {
	if len(cands) == 0 {
		return make([][]int, len(h.GPUs))
	}
	type gpuCands struct {
		pos  int
		best Distance
		near []int // cands at best, in cands order
	}
	gs := make([]gpuCands, len(h.GPUs))
	for i := range h.GPUs {
		g := gpuCands{pos: i, best: DistUnknown}
		for _, n := range cands {
			d := h.NICDistance(i, n)
			switch {
			case d == DistUnknown:
			case g.best == DistUnknown || d < g.best:
				g.best, g.near = d, []int{n}
			case d == g.best:
				g.near = append(g.near, n)
			}
		}
		gs[i] = g
	}
	order := make([]int, len(gs))
	for i := range order {
		order[i] = i
	}
	key := func(d Distance) int { // unknown last
		if d == DistUnknown {
			return int(SYS) + 1
		}
		return int(d)
	}
	sort.SliceStable(order, func(a, b int) bool {
		ga, gb := &gs[order[a]], &gs[order[b]]
		if key(ga.best) != key(gb.best) {
			return key(ga.best) < key(gb.best)
		}
		if len(ga.near) != len(gb.near) {
			return len(ga.near) < len(gb.near)
		}
		return h.GPUs[ga.pos].Index < h.GPUs[gb.pos].Index
	})
	load := map[int]int{}
	out := make([][]int, len(h.GPUs))
	for _, i := range order {
		from := gs[i].near
		if from == nil {
			from = cands
		}
		pick := from[0]
		for _, n := range from[1:] {
			if load[n] < load[pick] {
				pick = n
			}
		}
		load[pick]++
		out[i] = []int{pick}
	}
	for _, n := range cands {
		if load[n] > 0 {
			continue
		}
		to := -1
		for i := range gs {
			if !contains(gs[i].near, n) {
				continue
			}
			if to < 0 || len(out[i]) < len(out[to]) ||
				(len(out[i]) == len(out[to]) && h.GPUs[i].Index < h.GPUs[to].Index) {
				to = i
			}
		}
		if to >= 0 {
			out[to] = append(out[to], n)
			load[n]++
		}
	}
	return out
}

// NetNICs are the NICs the planners hand out to GPUs: the host's RDMA
// NICs, or every NIC when it has none (a host whose network is plain
// Ethernet), in the host's order.
func (h *Host) NetNICs() []int {
	var rdma, all []int
	for n := range h.NICs {
		all = append(all, n)
		if h.NICs[n].RDMA {
			rdma = append(rdma, n)
		}
	}
	if len(rdma) > 0 {
		return rdma
	}
	return all
}

// GPUNICs is AssignNICs over the host's NetNICs: for every position in
// h.GPUs, that GPU's NICs, its own (primary) NIC first.
func (h *Host) GPUNICs() [][]int { return AssignNICs(h, h.NetNICs()) }

func contains(v []int, x int) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}
