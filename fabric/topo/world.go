package topo

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/flexlink/flexlink/fabric"
)

// Member is one rank's place in the job: its host's topology and the index
// (GPU.Index) of the GPU it drives, -1 for a rank without one.
type Member struct {
	Host *Host `json:"host"`
	GPU  int   `json:"gpu"`
	// NICs, when set, are the rank's own NICs (indexes into Host.NICs) as
	// it chose them at run time (what it published); nil: assigned as
	// RankNICs says.
	NICs []int `json:"nics,omitempty"`
}

// World is the topology of a job: for every rank, its host and GPU. It is
// plain data, safe for concurrent reads.
type World struct {
	members []Member
	gpuPos  []int   // position of each member's GPU in Host.GPUs, or -1
	nics    [][]int // each member's own NICs (RankNICs)
}

// LinkInfo is one kind of link that can join two ranks, with nominal
// figures: the first-stage input of the multi-link balancer. Bandwidth is
// in bytes/s in one direction, 0 when unknown.
type LinkInfo struct {
	Kind      fabric.Kind
	Count     int // parallel links (NVLinks), 1 otherwise
	Bandwidth float64
	Latency   time.Duration
	// NICs are the NIC names used on rank a's and on rank b's side (net
	// and tcp links only).
	NICs [2]string
	// Rail is the rail both NICs of a net link sit on, -1 when they differ
	// or there is none.
	Rail int
	Desc string // human-readable: "NV18 via NVSwitch", "PCIe gen5 x16 staged"
}

// NewWorld checks and indexes the members (rank i is members[i]). Ranks
// with equal host names must report the same GPUs and NICs; they then
// share the first one's Host.
func NewWorld(members []Member) (*World, error) {
	w := &World{members: append([]Member(nil), members...), gpuPos: make([]int, len(members))}
	first := map[string]int{}
	for r, m := range w.members {
		if m.Host == nil {
			return nil, fmt.Errorf("world topology: rank %d has no host topology", r)
		}
		if f, ok := first[m.Host.Hostname]; !ok {
			first[m.Host.Hostname] = r
		} else if h := w.members[f].Host; h != m.Host {
			if !reflect.DeepEqual(h.GPUs, m.Host.GPUs) || !reflect.DeepEqual(h.NICs, m.Host.NICs) {
				return nil, fmt.Errorf("world topology: ranks %d and %d are both on host %s but report different topologies", f, r, h.Hostname)
			}
			w.members[r].Host = h
		}
		w.gpuPos[r] = -1
		if m.GPU < 0 {
			continue
		}
		for i := range m.Host.GPUs {
			if m.Host.GPUs[i].Index == m.GPU {
				w.gpuPos[r] = i
			}
		}
		if w.gpuPos[r] < 0 {
			return nil, fmt.Errorf("world topology: rank %d on host %s drives GPU %d, which the host does not have (%d GPUs)",
				r, m.Host.Hostname, m.GPU, len(m.Host.GPUs))
		}
	}
	w.assignNICs()
	return w, nil
}

// assignNICs fills w.nics: a member's own NICs when it has them, else
// OwnNICs over its host's railed NICs.
func (w *World) assignNICs() {
	w.nics = make([][]int, len(w.members))
	local := map[*Host]int{}
	for r, m := range w.members {
		i := local[m.Host]
		local[m.Host]++
		if m.NICs != nil {
			w.nics[r] = m.NICs
			continue
		}
		gpu := -1
		if w.gpuPos[r] >= 0 {
			gpu = m.GPU
		}
		w.nics[r] = OwnNICs(m.Host, RailNICs(m.Host), gpu, i)
	}
}

// OwnNICs is a rank's own NICs among cands (indexes into h.NICs, in the
// host's order) from what the rank knows of itself: a rank driving GPU
// gpu (GPU.Index) takes its GPU's NICs as AssignNICs hands out cands; a
// rank without one (gpu -1, a GPU h does not list, or one no candidate is
// near) takes the local-th candidate modulo their number, local being its
// index among the host's ranks. nil when cands is empty. Every rank of a
// host computes the same hand-out, so the runtime (fabric/transports) and
// the planners (RankNICs) agree.
func OwnNICs(h *Host, cands []int, gpu, local int) []int {
	if len(cands) == 0 {
		return nil
	}
	if gpu >= 0 {
		for pos := range h.GPUs {
			if h.GPUs[pos].Index == gpu {
				if a := AssignNICs(h, cands)[pos]; len(a) > 0 {
					return a
				}
			}
		}
	}
	return []int{cands[local%len(cands)]}
}

// RailNICs lists the NICs of h that have a rail, in the host's NIC order.
func RailNICs(h *Host) []int {
	var out []int
	for n := range h.NICs {
		if h.NICs[n].Rail >= 0 {
			out = append(out, n)
		}
	}
	return out
}

// RankNICs returns rank r's own NICs (indexes into its Host.NICs), the
// one it sends from first: for a rank with a GPU, its GPU's NICs as
// AssignNICs hands out the host's railed NICs (every GPU its own where
// there are as many, shared only where there are fewer); for a rank
// without a GPU, one railed NIC dealt by its index among the host's
// ranks. nil when the host has no rails. The slice is shared: do not
// modify.
func (w *World) RankNICs(r int) []int { return w.nics[r] }

// EncodeMember is what one rank publishes about itself (its host topology
// and GPU index) for DecodeWorld. The exchange itself (one AllGather through
// the bootstrap) belongs to the communicator core: topo moves no bytes.
func EncodeMember(local *Host, gpu int) ([]byte, error) {
	b, err := json.Marshal(Member{Host: local, GPU: gpu})
	if err != nil {
		return nil, fmt.Errorf("world topology: encode: %w", err)
	}
	return b, nil
}

// DecodeWorld builds the World from every rank's EncodeMember bytes (index =
// rank), validating each. Ranks are on the same host when their host names
// are equal.
func DecodeWorld(all [][]byte) (*World, error) {
	members := make([]Member, len(all))
	for r, d := range all {
		if err := json.Unmarshal(d, &members[r]); err != nil {
			return nil, fmt.Errorf("world topology: decode rank %d's topology: %w", r, err)
		}
		if members[r].Host == nil {
			return nil, fmt.Errorf("world topology: rank %d sent no host topology", r)
		}
		if err := members[r].Host.Validate(); err != nil {
			return nil, fmt.Errorf("world topology: rank %d: %w", r, err)
		}
	}
	return NewWorld(members)
}

// Size is the number of ranks.
func (w *World) Size() int { return len(w.members) }

// Member returns rank r's host and GPU. The Host is shared: do not modify.
func (w *World) Member(r int) Member { return w.members[r] }

// SameHost reports whether ranks a and b run on one host.
func (w *World) SameHost(a, b int) bool {
	return w.members[a].Host.Hostname == w.members[b].Host.Hostname
}

// Links lists the links that can join ranks a and b, fastest kind first:
// on one host nvlink (when their GPUs are NVLink-connected, directly or
// through NVSwitches), pcie (staged through host memory; both ranks have
// GPUs) and shm; across hosts net (when both hosts have RDMA NICs) and tcp.
// Links(b, a) lists the same links with the NIC sides swapped. a == b
// gives nil.
func (w *World) Links(a, b int) []LinkInfo {
	if a == b {
		return nil
	}
	if w.SameHost(a, b) {
		return w.hostLinks(a, b)
	}
	return w.netLinks(a, b)
}

func (w *World) hostLinks(a, b int) []LinkInfo {
	var out []LinkInfo
	h := w.members[a].Host
	ga, gb := w.gpuPos[a], w.gpuPos[b]
	if ga >= 0 && gb >= 0 && ga != gb {
		if n, sw := h.NVLinkCount(ga, gb); n > 0 {
			bw := min(h.GPUs[ga].LinkBW, h.GPUs[gb].LinkBW) * float64(n)
			desc := fmt.Sprintf("NV%d", n)
			if sw {
				desc += " via NVSwitch"
			}
			out = append(out, LinkInfo{Kind: fabric.KindNVLink, Count: n, Bandwidth: bw, Latency: NominalNVLinkLatency, Rail: -1, Desc: desc})
		}
		pa, pb := h.GPUs[ga].PCIe, h.GPUs[gb].PCIe
		out = append(out, LinkInfo{Kind: fabric.KindPCIe, Count: 1, Bandwidth: min(pcieBW(pa), pcieBW(pb)),
			Latency: NominalPCIeLatency, Rail: -1,
			Desc: fmt.Sprintf("PCIe staged through host memory (%s, %s)", pcieDesc(pa), pcieDesc(pb))})
	}
	return append(out, LinkInfo{Kind: fabric.KindShm, Count: 1, Bandwidth: NominalShmBW, Latency: NominalShmLatency, Rail: -1, Desc: "shared memory " + h.Hostname})
}

// pcieBW is a GPU's PCIe bandwidth: the link's maximum (an idle GPU trains
// its link down, so the current state understates it), else the current.
func pcieBW(l PCIeLink) float64 {
	if bw := PCIeBW(l.MaxGen, l.MaxWidth); bw > 0 {
		return bw
	}
	return PCIeBW(l.Gen, l.Width)
}

func pcieDesc(l PCIeLink) string {
	g, w := l.MaxGen, l.MaxWidth
	if g == 0 || w == 0 {
		g, w = l.Gen, l.Width
	}
	if g == 0 || w == 0 {
		return "unknown"
	}
	return fmt.Sprintf("gen%d x%d", g, w)
}

func (w *World) netLinks(a, b int) []LinkInfo {
	var out []LinkInfo
	if na, nb, ok := w.netPair(a, b); ok {
		ha, hb := w.members[a].Host, w.members[b].Host
		ca, cb := &ha.NICs[na], &hb.NICs[nb]
		rail := -1
		if ca.Rail >= 0 && ca.Rail == cb.Rail {
			rail = ca.Rail
		}
		desc := fmt.Sprintf("RDMA %s:%s -> %s:%s", ha.Hostname, ca.Name, hb.Hostname, cb.Name)
		if rail >= 0 {
			desc += fmt.Sprintf(" (rail %d)", rail)
		}
		out = append(out, LinkInfo{Kind: fabric.KindNet, Count: 1, Bandwidth: min(ca.Speed, cb.Speed) / 8,
			Latency: NominalNetLatency, NICs: [2]string{ca.Name, cb.Name}, Rail: rail, Desc: desc})
	}
	ta, sa := fastestNetdev(w.members[a].Host)
	tb, sb := fastestNetdev(w.members[b].Host)
	bw := min(sa, sb) / 8
	if bw == 0 {
		bw = NominalTCPBW
	}
	return append(out, LinkInfo{Kind: fabric.KindTCP, Count: 1, Bandwidth: bw, Latency: NominalTCPLatency, NICs: [2]string{ta, tb}, Rail: -1,
		Desc: fmt.Sprintf("TCP %s:%s -> %s:%s", w.members[a].Host.Hostname, ta, w.members[b].Host.Hostname, tb)})
}

// netPair picks the RDMA NICs of a net link between ranks a and b: each
// rank's own NIC (RankNICs); when those are on different rails, both use
// the rail of the lower rank's NIC where the other side has it (one of
// its own NICs on that rail, else any of its host's), since rail alignment
// keeps traffic on one leaf switch. The choice is the same for (a, b) and
// (b, a).
func (w *World) netPair(a, b int) (na, nb int, ok bool) {
	na, nb = w.ownRDMA(a), w.ownRDMA(b)
	if na < 0 || nb < 0 {
		return 0, 0, false
	}
	ha, hb := w.members[a].Host, w.members[b].Host
	ra, rb := ha.NICs[na].Rail, hb.NICs[nb].Rail
	if ra == rb {
		return na, nb, true
	}
	if a < b {
		if i := w.nicOnRail(b, ra); i >= 0 {
			nb = i
		}
	} else if i := w.nicOnRail(a, rb); i >= 0 {
		na = i
	}
	return na, nb, true
}

// ownRDMA is rank r's RDMA NIC: its first own RDMA NIC (RankNICs); else
// (no rails) the host's RDMA NIC with the lowest rail. -1 when the host
// has none.
func (w *World) ownRDMA(r int) int {
	h := w.members[r].Host
	for _, n := range w.nics[r] {
		if h.NICs[n].RDMA {
			return n
		}
	}
	best := -1
	for n := range h.NICs {
		if h.NICs[n].RDMA && (best < 0 || railKey(h.NICs[n].Rail) < railKey(h.NICs[best].Rail)) {
			best = n
		}
	}
	return best
}

// railKey orders rails with "no rail" last.
func railKey(r int) int {
	if r < 0 {
		return 1 << 30
	}
	return r
}

// nicOnRail is an RDMA NIC of rank r's host on rail: one of r's own NICs
// if one is there, else the host's first; -1 when none.
func (w *World) nicOnRail(r, rail int) int {
	h := w.members[r].Host
	if rail < 0 {
		return -1
	}
	for _, n := range w.nics[r] {
		if h.NICs[n].Rail == rail && h.NICs[n].RDMA {
			return n
		}
	}
	for i := range h.NICs {
		if h.NICs[i].Rail == rail && h.NICs[i].RDMA {
			return i
		}
	}
	return -1
}

// fastestNetdev is the NIC TCP would use at best: the fastest NIC with a
// net device, plain NICs before the net devices of RDMA NICs (IPoIB; like
// NCCL's socket transport, which tries ib interfaces last). It returns the
// net device and its speed in bits/s (0: unknown); "" when there is none.
func fastestNetdev(h *Host) (string, float64) {
	for _, rdma := range []bool{false, true} {
		name, speed := "", 0.0
		for _, n := range h.NICs {
			if n.Netdev != "" && n.RDMA == rdma && (name == "" || n.Speed > speed) {
				name, speed = n.Netdev, n.Speed
			}
		}
		if name != "" {
			return name, speed
		}
	}
	return "", 0
}
