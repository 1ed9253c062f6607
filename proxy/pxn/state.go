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
	// homes are the rank's own NICs (topo.World.RankNICs): for a GPU,
	// the railed NICs topo.AssignNICs gives it (two GPUs and two NICs
	// under one switch take one each; two GPUs and one NIC share it; one
	// GPU and two NICs has both). homes[0] is the NIC it sends from
	// directly and its rail is the rank's rail.
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
		for _, r := range h.ranks {
			ri := &s.ranks[r]
			ri.homes, ri.near = w.RankNICs(r), nearNIC(h, ri.gpu, w.RankNICs(r))
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

// nearNIC reports whether a rank's own NIC is behind its GPU's PCIe
// switches (PIX or PXB); true for a rank without a GPU or NIC, or where
// the distance is unknown.
func nearNIC(h *hostInfo, gpu int, homes []int) bool {
	if gpu < 0 || len(homes) == 0 {
		return true
	}
	d := h.h.NICDistance(gpu, homes[0])
	return d == topo.DistUnknown || d <= topo.PXB
}
