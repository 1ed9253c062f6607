package pxn

import (
	"fmt"
	"sort"

	"github.com/flexlink/flexlink/fabric/topo"
)

// state is what the rules read, derived once from the World.
type state struct {
	opt   Options
	hosts []hostInfo
	ranks []rankInfo
}

// hostInfo is one host of the job.
type hostInfo struct {
	h      *topo.Host
	ranks  []int       // its ranks, ascending
	railed []int       // its NICs with a rail, by rail
	onRail map[int]int // rail -> NIC index (the first NIC listed on it)
}

// rankInfo is one rank's place.
type rankInfo struct {
	host int // index into state.hosts
	gpu  int // position of its GPU in Host.GPUs, -1: none
	// homes are the rank's own NICs, by rail: for a GPU, the railed NICs
	// nearest it by PCI distance (two GPUs under one switch with one NIC
	// share it; a GPU with two NICs under its switch has both). homes[0]
	// is the NIC it sends from directly and its rail is the rank's rail.
	homes []int
	// near: the GPU has a home NIC behind its PCIe switches (PIX or PXB),
	// or the rank has no GPU, or distances are unknown (level 1 relays
	// only ranks that are not near).
	near bool
	// railOrd is the rank's position among its host's ranks with the same
	// rail, used to spread destinations over relays.
	railOrd int
}

func (hi *hostInfo) name() string         { return hi.h.Hostname }
func (hi *hostInfo) nicName(n int) string { return hi.h.NICs[n].Name }
func (hi *hostInfo) rail(n int) int       { return hi.h.NICs[n].Rail }

func (ri *rankInfo) hasHome(nic int) bool {
	for _, n := range ri.homes {
		if n == nic {
			return true
		}
	}
	return false
}

func newState(w *topo.World, opt Options) (*state, error) {
	s := &state{opt: opt, ranks: make([]rankInfo, w.Size())}
	byName := map[string]int{}
	for r := range w.Size() {
		m := w.Member(r)
		hi, ok := byName[m.Host.Hostname]
		if !ok {
			hi = len(s.hosts)
			byName[m.Host.Hostname] = hi
			s.hosts = append(s.hosts, newHostInfo(m.Host))
		}
		s.hosts[hi].ranks = append(s.hosts[hi].ranks, r)
		ri := &s.ranks[r]
		ri.host, ri.gpu = hi, -1
		for i := range m.Host.GPUs {
			if m.GPU >= 0 && m.Host.GPUs[i].Index == m.GPU {
				ri.gpu = i
			}
		}
		if ri.gpu < 0 && opt.Mem == GPUMem {
			return nil, fmt.Errorf("pxn: rank %d on host %s has no GPU, but the buffers are GPU memory", r, m.Host.Hostname)
		}
	}
	for hi := range s.hosts {
		h := &s.hosts[hi]
		count := map[int]int{}
		for local, r := range h.ranks {
			ri := &s.ranks[r]
			ri.homes, ri.near = homes(h, ri.gpu, local)
			if len(ri.homes) > 0 {
				rail := h.rail(ri.homes[0])
				ri.railOrd = count[rail]
				count[rail]++
			}
		}
	}
	return s, nil
}

func newHostInfo(h *topo.Host) hostInfo {
	hi := hostInfo{h: h, onRail: map[int]int{}}
	for n := range h.NICs {
		if r := h.NICs[n].Rail; r >= 0 {
			hi.railed = append(hi.railed, n)
			if _, dup := hi.onRail[r]; !dup {
				hi.onRail[r] = n
			}
		}
	}
	sort.SliceStable(hi.railed, func(a, b int) bool { return h.NICs[hi.railed[a]].Rail < h.NICs[hi.railed[b]].Rail })
	return hi
}

// homes finds a rank's own NICs (see rankInfo.homes). A GPU takes the
// railed NICs at its best known PCI distance. Where no distance is known
// (a topology file without PCI positions), and for a rank without a GPU,
// the host's rails are dealt out in turn: GPU position i, or the rank's
// local index i, gets the i-th railed NIC modulo their number.
func homes(h *hostInfo, gpu, local int) ([]int, bool) {
	if len(h.railed) == 0 {
		return nil, true
	}
	if gpu >= 0 {
		best := topo.DistUnknown
		var out []int
		for _, n := range h.railed {
			d := h.h.NICDistance(gpu, n)
			switch {
			case d == topo.DistUnknown:
			case best == topo.DistUnknown || d < best:
				best, out = d, []int{n}
			case d == best:
				out = append(out, n)
			}
		}
		if out != nil {
			return out, best <= topo.PXB
		}
		return []int{h.railed[gpu%len(h.railed)]}, true
	}
	return []int{h.railed[local%len(h.railed)]}, true
}
