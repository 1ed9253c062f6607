// Package pxn plans rail-aligned routes for messages between ranks on
// different hosts (PXN, "PCI x NVLink", as NCCL 2.12 introduced it).
//
// In a rail-optimised cluster every host has NICs on rails 0..k-1 and NIC
// r of every host hangs off leaf switch r. A message that leaves host A on
// rail 2 and arrives at a rank whose NIC is on rail 5 crosses the spine;
// one that stays on rail 5 does not. PXN keeps it on rail 5: the sender
// hands the data to the rank of its own host whose NIC is on the
// destination's rail (over NVLink for GPU buffers, over shared memory for
// host buffers), and that rank's proxy posts the network send. Because all
// the local senders for one destination then go through one relay, the
// receiver takes their messages in one multi-receive (Aggregate).
//
// The planner is a pure function in the style of etcd-io/raft: a World
// (every rank's host topology and GPU) and Options in, a Plan out, no I/O
// and no clock, the same output for the same input on every rank. See
// docs/PXN.md for the rules and the uneven cases.
package pxn

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
)

// Level says when a message takes a relay, with the values of NCCL's
// NCCL_P2P_PXN_LEVEL.
type Level int

const (
	// Off: every rank sends from its own NIC; a message for another rail
	// crosses the spine.
	Off Level = 0
	// FarNIC: a rank relays only when its GPU has no NIC near it (none
	// behind its PCIe switches, PIX or PXB); it then relays through an
	// NVLink peer on the destination's rail. Ranks with a near NIC send
	// from it, across rails when they must.
	FarNIC Level = 1
	// Rail: every message leaves on the destination's rail, relayed
	// through the local rank whose NIC sits on it, wherever that is
	// possible (the default, as in NCCL).
	Rail Level = 2
)

// DefaultLevel is the level used when none is set.
const DefaultLevel = Rail

// ParseLevel reads a level: 0, 1 or 2 (FLEXLINK_PXN, flexinfo --level).
func ParseLevel(s string) (Level, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < int(Off) || n > int(Rail) {
		return 0, fmt.Errorf("pxn level %q: want 0 (off), 1 (only for GPUs without a near NIC) or 2 (rail-aligned)", s)
	}
	return Level(n), nil
}

func (l Level) String() string {
	switch l {
	case Off:
		return "off"
	case FarNIC:
		return "far-nic"
	case Rail:
		return "rail"
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// Mem is where the buffers of the planned operation live. It decides how
// data may reach a relay: GPU buffers only over NVLink (every rank needs a
// GPU, and a relay must have NVLink to the sender's GPU), host buffers
// over shared memory (any rank of the host may relay, GPU or not).
type Mem int

const (
	GPUMem Mem = iota
	HostMem
)

func (m Mem) String() string {
	if m == HostMem {
		return "host"
	}
	return "gpu"
}

// MarshalText writes "gpu" or "host".
func (m Mem) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads "gpu" or "host".
func (m *Mem) UnmarshalText(b []byte) error {
	switch string(b) {
	case "gpu":
		*m = GPUMem
	case "host":
		*m = HostMem
	default:
		return fmt.Errorf("pxn memory kind %q: want gpu or host", b)
	}
	return nil
}

// Options are the planner's settings.
type Options struct {
	Level Level
	Mem   Mem
}

// Hops: how data moves from the sender to its relay.
const (
	HopNVLink = string(fabric.KindNVLink)
	HopShm    = string(fabric.KindShm)
)

// Route is how one message goes from rank Src to rank Dst on another
// host: Src hands it to Via over Hop, Via sends it from NIC (a NIC of
// their host) on Rail. Via == Src, Hop == "" when Src sends itself.
type Route struct {
	Src int    `json:"src"`
	Dst int    `json:"dst"`
	Via int    `json:"via"`
	NIC string `json:"nic"`
	// Rail is the sending NIC's rail, DstRail the rail of Dst's NIC; -1
	// for none. They differ when the message crosses the spine.
	Rail    int    `json:"rail"`
	DstRail int    `json:"dst_rail"`
	Hop     string `json:"hop,omitempty"`
	Reason  string `json:"reason"`
}

// Relayed reports whether the message takes a hop before the network.
func (r Route) Relayed() bool { return r.Via != r.Src }

// Aligned reports whether the message stays on its destination's rail.
func (r Route) Aligned() bool { return r.Rail >= 0 && r.Rail == r.DstRail }

// Plan is every route of a job: one per ordered pair of ranks on different
// hosts, sorted by (Src, Dst). Pairs on one host have no route (they talk
// over their host links).
type Plan struct {
	Level  Level    `json:"level"`
	Mem    Mem      `json:"mem"`
	Hosts  []string `json:"hosts"` // Hosts[r]: rank r's host name
	Routes []Route  `json:"routes"`
}

// Route returns the route from src to dst, false when they share a host
// or are out of range.
func (p *Plan) Route(src, dst int) (Route, bool) {
	i := sort.Search(len(p.Routes), func(i int) bool {
		r := p.Routes[i]
		return r.Src > src || (r.Src == src && r.Dst >= dst)
	})
	if i < len(p.Routes) && p.Routes[i].Src == src && p.Routes[i].Dst == dst {
		return p.Routes[i], true
	}
	return Route{}, false
}

// Compute plans the route of every pair of ranks on different hosts. It
// reads the World only (rails must be assigned, as topo.Load and
// topo.Local do). It fails when the options are out of range, or when the
// buffers are GPU memory and a rank has no GPU.
func Compute(w *topo.World, opt Options) (*Plan, error) {
	if opt.Level < Off || opt.Level > Rail {
		return nil, fmt.Errorf("pxn: level %d out of range 0..2", int(opt.Level))
	}
	if opt.Mem != GPUMem && opt.Mem != HostMem {
		return nil, fmt.Errorf("pxn: unknown memory kind %d", int(opt.Mem))
	}
	s, err := newState(w, opt)
	if err != nil {
		return nil, err
	}
	n := w.Size()
	p := &Plan{Level: opt.Level, Mem: opt.Mem, Hosts: make([]string, n), Routes: []Route{}}
	for r := range n {
		p.Hosts[r] = w.Member(r).Host.Hostname
	}
	for src := range n {
		for dst := range n {
			if s.ranks[src].host != s.ranks[dst].host {
				p.Routes = append(p.Routes, s.route(src, dst))
			}
		}
	}
	return p, nil
}

// route applies the rules in order; the first that decides gives the
// reason.
func (s *state) route(src, dst int) Route {
	rs, rd := &s.ranks[src], &s.ranks[dst]
	hs, hd := &s.hosts[rs.host], &s.hosts[rd.host]
	r := Route{Src: src, Dst: dst, Via: src, Rail: -1, DstRail: -1}
	if len(rs.homes) > 0 {
		r.NIC, r.Rail = hs.nicName(rs.homes[0]), hs.rail(rs.homes[0])
	}
	if len(rd.homes) > 0 {
		r.DstRail = hd.rail(rd.homes[0])
	}
	switch {
	case r.DstRail < 0:
		r.Reason = fmt.Sprintf("host %s has no rails: direct", hd.name())
		return r
	case len(rs.homes) == 0:
		r.Reason = fmt.Sprintf("host %s has no rails: direct, the transport picks the NIC", hs.name())
		return r
	}
	for _, n := range rs.homes {
		if hs.rail(n) == r.DstRail {
			r.NIC, r.Rail = hs.nicName(n), r.DstRail
			r.Reason = fmt.Sprintf("src is on dst's rail %d", r.DstRail)
			return r
		}
	}
	nic, ok := hs.onRail[r.DstRail]
	switch {
	case s.opt.Level == Off:
		r.Reason = "pxn off: direct, cross-rail"
		return r
	case !ok:
		r.Reason = fmt.Sprintf("host %s has no rail %d: direct, cross-rail", hs.name(), r.DstRail)
		return r
	case s.opt.Level == FarNIC && rs.near:
		r.Reason = fmt.Sprintf("level 1: src has its own near NIC %s: direct, cross-rail", r.NIC)
		return r
	}
	var onRail, reach []int
	for _, c := range hs.ranks {
		if c == src || !s.ranks[c].hasHome(nic) {
			continue
		}
		onRail = append(onRail, c)
		if s.reachable(src, c) {
			reach = append(reach, c)
		}
	}
	switch {
	case len(onRail) == 0:
		r.Reason = fmt.Sprintf("no rank of host %s is on rail %d: direct, cross-rail", hs.name(), r.DstRail)
		return r
	case len(reach) == 0:
		gpus := make([]int, len(onRail))
		for i, c := range onRail {
			gpus[i] = hs.h.GPUs[s.ranks[c].gpu].Index
		}
		r.Reason = fmt.Sprintf("no NVLink from GPU %d to the GPUs on rail %d (%s): direct, cross-rail",
			hs.h.GPUs[rs.gpu].Index, r.DstRail, ints(gpus))
		return r
	}
	// Balance: the destinations on one rail of one host take the relays
	// that can serve them in turn, so every relay carries about as many
	// destinations, and all senders to one destination share its relay
	// (which is what makes their messages one multi-receive).
	r.Via = reach[rd.railOrd%len(reach)]
	r.NIC, r.Rail = hs.nicName(nic), r.DstRail
	if s.opt.Mem == GPUMem {
		r.Hop = HopNVLink
		r.Reason = fmt.Sprintf("relay over nvlink to GPU %d, on rail %d", hs.h.GPUs[s.ranks[r.Via].gpu].Index, r.DstRail)
	} else {
		r.Hop = HopShm
		r.Reason = fmt.Sprintf("relay over shm to rank %d, on rail %d", r.Via, r.DstRail)
	}
	return r
}

// reachable reports whether src may hand data to relay c: over shm for
// host buffers, only over NVLink for GPU buffers.
func (s *state) reachable(src, c int) bool {
	if s.opt.Mem == HostMem {
		return true
	}
	a, b := s.ranks[src].gpu, s.ranks[c].gpu
	if a < 0 || b < 0 || a == b {
		return false
	}
	n, _ := s.hosts[s.ranks[src].host].h.NVLinkCount(a, b)
	return n > 0
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// LevelFromEnv reads FLEXLINK_PXN: on is false for "off" (the default:
// no PXN, every rank uses every NIC).
func LevelFromEnv(env settings.Env) (l Level, on bool, err error) {
	v := env.String("FLEXLINK_PXN")
	if v == "off" {
		return Off, false, nil
	}
	l, err = ParseLevel(v)
	if err != nil {
		return 0, false, fmt.Errorf("FLEXLINK_PXN: %w", err)
	}
	return l, true, nil
}
