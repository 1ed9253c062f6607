package launcher

import (
	"fmt"
	"strconv"
	"strings"
)

// MapBy says how ranks are laid out over hosts.
type MapBy string

const (
	// MapBySlot fills each host's slots before moving to the next host, so
	// consecutive ranks share a host (OpenMPI --map-by slot, the default).
	MapBySlot MapBy = "slot"
	// MapByNode deals ranks to hosts round-robin, one at a time
	// (OpenMPI --map-by node).
	MapByNode MapBy = "node"
)

// ParseMapBy accepts "slot" (or "") and "node".
func ParseMapBy(s string) (MapBy, error) {
	m, err := ParseMapping(s)
	if err == nil && m.PerUnit > 0 {
		err = fmt.Errorf("--map-by %q: ppr sets ranks per node; use ParseMapping", s)
	}
	return m.By, err
}

// Domain is the unit of --map-by ppr:N:UNIT: a whole host, one of its NUMA
// nodes, or one of its sockets (CPU packages).
type Domain string

// The units of ppr:N:UNIT, spelled as OpenMPI spells them.
const (
	PerHost   Domain = "node"
	PerNUMA   Domain = "numa"
	PerSocket Domain = "socket"
)

// Mapping is a parsed --map-by.
type Mapping struct {
	By      MapBy
	PerUnit int    // ppr's N: ranks on each Unit of each host; 0: no ppr
	Unit    Domain // ppr's unit; "" when PerUnit is 0
}

// ParseMapping reads mpirun's --map-by: "slot" (or ""), "node", or
// "ppr:N:UNIT" with UNIT node, numa (OpenMPI 5: numanode) or socket
// (OpenMPI 5: package): N ranks on each host, on each NUMA node of each
// host, or on each socket of each host, filled host by host.
func ParseMapping(s string) (Mapping, error) {
	switch l := strings.ToLower(s); {
	case l == "" || l == "slot":
		return Mapping{By: MapBySlot}, nil
	case l == "node":
		return Mapping{By: MapByNode}, nil
	case strings.HasPrefix(l, "ppr:"):
		n, unit, ok := strings.Cut(strings.TrimPrefix(l, "ppr:"), ":")
		k, cerr := strconv.Atoi(n)
		if !ok || cerr != nil || k < 1 {
			return Mapping{}, fmt.Errorf("--map-by %q: want ppr:N:node, ppr:N:numa or ppr:N:socket with N of 1 or more", s)
		}
		switch unit {
		case "node":
			return Mapping{By: MapBySlot, PerUnit: k, Unit: PerHost}, nil
		case "numa", "numanode":
			return Mapping{By: MapBySlot, PerUnit: k, Unit: PerNUMA}, nil
		case "socket", "package":
			return Mapping{By: MapBySlot, PerUnit: k, Unit: PerSocket}, nil
		}
		return Mapping{}, fmt.Errorf("--map-by %q: ranks per %q are not supported: want ppr:N:node, ppr:N:numa or ppr:N:socket (modifiers such as :pe=2 neither)", s, unit)
	}
	return Mapping{}, fmt.Errorf("--map-by %q: want slot, node, ppr:N:node, ppr:N:numa or ppr:N:socket", s)
}

// Placement is where one rank runs.
type Placement struct {
	Rank      int
	Host      string
	NodeRank  int // index of Host among the hosts that got at least one rank
	LocalRank int // index of this rank among the ranks on Host, in rank order
	LocalSize int // number of ranks on Host
	GPU       int // LocalRank mod the host's GPUs; -1 when it has none
	// In is the NUMA node or socket of Host that --map-by ppr:N:numa or
	// ppr:N:socket put the rank in; zero (Unit "") otherwise.
	In DomainSlot `json:"in,omitzero"`
}

// PlanRequest is the planner's input.
type PlanRequest struct {
	Hosts []Host
	NP    int // ranks; 0 means the total of the hosts' slots
	MapBy MapBy
	// PerNode, when above 0, is the number of ranks on each host (-N,
	// --map-by ppr:N:node): every host takes PerNode ranks, NP defaults to
	// PerNode times the hosts, and a host with fewer slots needs
	// Oversubscribe.
	PerNode int
	// Unit is what PerNode counts ranks of: "" or PerHost (the host),
	// PerNUMA or PerSocket (each NUMA node or socket of the host, whose
	// number the Host says; the rank's Placement.In says which).
	Unit          Domain
	Oversubscribe bool // allow more ranks than slots (up to MaxSlots)
}

// Plan places ranks on hosts. It is pure: same request, same plan.
//
// Without Oversubscribe a host takes at most Slots ranks. With it, once
// every slot is taken the remaining ranks are dealt round-robin to the
// hosts that are below their MaxSlots (no cap when MaxSlots is 0). Under
// MapBySlot each host's ranks are consecutive; under MapByNode rank r goes
// to the r-th host in round-robin order among hosts with room.
func Plan(req PlanRequest) ([]Placement, error) {
	if len(req.Hosts) == 0 {
		return nil, fmt.Errorf("plan: no hosts")
	}
	if req.PerNode > 0 {
		hosts, err := perNodeHosts(req)
		if err != nil {
			return nil, err
		}
		req.Hosts, req.Oversubscribe = hosts, false
	}
	total := 0
	for _, h := range req.Hosts {
		if h.Slots < 1 {
			return nil, fmt.Errorf("plan: host %s has %d slots", h.Name, h.Slots)
		}
		if h.MaxSlots != 0 && h.MaxSlots < h.Slots {
			return nil, fmt.Errorf("plan: host %s: max_slots=%d is below slots=%d", h.Name, h.MaxSlots, h.Slots)
		}
		total += h.Slots
	}
	np := req.NP
	if np == 0 {
		np = total
	}
	if np < 0 {
		return nil, fmt.Errorf("plan: -np %d: must be positive", np)
	}
	if np > total && !req.Oversubscribe {
		return nil, fmt.Errorf("plan: %d ranks requested but only %d slots available on %s; use --oversubscribe to run more ranks than slots", np, total, hostSummary(req.Hosts))
	}
	var order []int // host index of each rank
	var err error
	switch req.MapBy {
	case "", MapBySlot:
		order, err = mapBySlot(req.Hosts, np)
	case MapByNode:
		order, err = mapByNode(req.Hosts, np)
	default:
		return nil, fmt.Errorf("plan: unknown map-by %q", req.MapBy)
	}
	if err != nil {
		return nil, err
	}
	out := placements(req.Hosts, order)
	if req.PerNode > 0 && req.Unit != "" && req.Unit != PerHost {
		setDomains(out, req.Unit, req.PerNode)
	}
	return out, nil
}

// perNodeHosts gives every host PerNode ranks per unit (and no more),
// checking that each has that many slots or oversubscription is allowed,
// and that NP fits.
func perNodeHosts(req PlanRequest) ([]Host, error) {
	out := make([]Host, len(req.Hosts))
	total := 0
	for i, h := range req.Hosts {
		units, err := h.units(req.Unit)
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		n := req.PerNode * units
		what := fmt.Sprintf("%d ranks per %s", req.PerNode, req.Unit.name())
		if units != 1 {
			what += fmt.Sprintf(" (%d %ss: %d ranks)", units, req.Unit.name(), n)
		}
		if h.Slots < n && !req.Oversubscribe {
			return nil, fmt.Errorf("plan: %s but host %s has %d slots; use --oversubscribe to run more ranks than slots", what, h.Name, h.Slots)
		}
		if h.MaxSlots != 0 && h.MaxSlots < n {
			return nil, fmt.Errorf("plan: %s but host %s has max_slots=%d", what, h.Name, h.MaxSlots)
		}
		h.Slots, h.MaxSlots = n, n
		out[i] = h
		total += n
	}
	if req.NP > total {
		return nil, fmt.Errorf("plan: -np %d is more than %d ranks per %s on %d hosts (%d)", req.NP, req.PerNode, req.Unit.name(), len(out), total)
	}
	return out, nil
}

// capacity is how many ranks host h may take in the current pass: its slots
// in the first pass, its MaxSlots (or unbounded) when oversubscribing.
func capacity(h Host, oversubscribed bool) int {
	if !oversubscribed {
		return h.Slots
	}
	if h.MaxSlots == 0 {
		return int(^uint(0) >> 1)
	}
	return h.MaxSlots
}

// counts decides how many ranks each host gets: slots first, in host
// order, then the rest one at a time round-robin to hosts with room.
func counts(hosts []Host, np int) ([]int, error) {
	n := make([]int, len(hosts))
	left := np
	for i, h := range hosts {
		k := min(h.Slots, left)
		n[i], left = k, left-k
	}
	for left > 0 {
		placed := false
		for i, h := range hosts {
			if left > 0 && n[i] < capacity(h, true) {
				n[i]++
				left--
				placed = true
			}
		}
		if !placed {
			return nil, fmt.Errorf("plan: %d ranks do not fit on %s even oversubscribed (max_slots reached)", np, hostSummary(hosts))
		}
	}
	return n, nil
}

func mapBySlot(hosts []Host, np int) ([]int, error) {
	n, err := counts(hosts, np)
	if err != nil {
		return nil, err
	}
	order := make([]int, 0, np)
	for i, k := range n {
		for range k {
			order = append(order, i)
		}
	}
	return order, nil
}

func mapByNode(hosts []Host, np int) ([]int, error) {
	n := make([]int, len(hosts))
	order := make([]int, 0, np)
	for _, over := range []bool{false, true} {
		for len(order) < np {
			placed := false
			for i, h := range hosts {
				if len(order) < np && n[i] < capacity(h, over) {
					n[i]++
					order = append(order, i)
					placed = true
				}
			}
			if !placed {
				break
			}
		}
	}
	if len(order) < np {
		return nil, fmt.Errorf("plan: %d ranks do not fit on %s even oversubscribed (max_slots reached)", np, hostSummary(hosts))
	}
	return order, nil
}

// placements turns the host of each rank into Placements.
func placements(hosts []Host, order []int) []Placement {
	size := make([]int, len(hosts))
	for _, h := range order {
		size[h]++
	}
	node := make([]int, len(hosts))
	next := 0
	for i, s := range size {
		node[i] = -1
		if s > 0 {
			node[i] = next
			next++
		}
	}
	local := make([]int, len(hosts))
	out := make([]Placement, len(order))
	for r, h := range order {
		gpu := -1
		if g := hosts[h].GPUs; g > 0 {
			gpu = local[h] % g
		}
		out[r] = Placement{Rank: r, Host: hosts[h].Name, NodeRank: node[h], LocalRank: local[h], LocalSize: size[h], GPU: gpu}
		local[h]++
	}
	return out
}

func hostSummary(hosts []Host) string {
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = fmt.Sprintf("%s (%d)", h.Name, h.Slots)
	}
	return strings.Join(parts, ", ")
}
