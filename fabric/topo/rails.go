package topo

import (
	"fmt"
	"sort"
	"strings"

	"github.com/flexlink/flexlink/internal/settings"
)

// ParseRails parses FLEXLINK_RAILS: NIC names in rail order, separated by
// commas ("mlx5_0,mlx5_3,mlx5_1": mlx5_0 is rail 0). Empty gives nil.
func ParseRails(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("FLEXLINK_RAILS=%q: empty NIC name", s)
		}
		if seen[f] {
			return nil, fmt.Errorf("FLEXLINK_RAILS=%q: %s appears twice", s, f)
		}
		seen[f] = true
		out = append(out, f)
	}
	return out, nil
}

// RailsFromEnv reads FLEXLINK_RAILS.
func RailsFromEnv(env settings.Env) ([]string, error) {
	return ParseRails(env.String("FLEXLINK_RAILS"))
}

// AssignRails sets every NIC's Rail. An override (FLEXLINK_RAILS) wins,
// then h.Rails from the topology file: both list NIC names in rail order,
// and a name the host does not have is an error. Otherwise the RDMA NICs
// are numbered in the order of the GPU nearest to each (lowest GPU index
// among those at the NIC's best PCI distance, then bus id), so the NIC next
// to GPU0 is rail 0 on every host of a homogeneous cluster; other NICs get
// no rail (-1). A host without RDMA NICs has no rails.
func AssignRails(h *Host, override []string) error {
	order := override
	if len(order) == 0 {
		order = h.Rails
	}
	for i := range h.NICs {
		h.NICs[i].Rail = -1
	}
	if len(order) > 0 {
		for r, name := range order {
			i := nicByName(h, name)
			if i < 0 {
				return fmt.Errorf("host %s: rail %d names NIC %q, which the host does not have", h.Hostname, r, name)
			}
			h.NICs[i].Rail = r
		}
		return nil
	}
	type cand struct{ nic, gpu int }
	var cs []cand
	for n := range h.NICs {
		if h.NICs[n].RDMA {
			cs = append(cs, cand{n, nearestGPU(h, n)})
		}
	}
	sort.SliceStable(cs, func(a, b int) bool {
		if cs[a].gpu != cs[b].gpu {
			return cs[a].gpu < cs[b].gpu
		}
		return h.NICs[cs[a].nic].BusID < h.NICs[cs[b].nic].BusID
	})
	for r, c := range cs {
		h.NICs[c.nic].Rail = r
	}
	return nil
}

func nicByName(h *Host, name string) int {
	for i := range h.NICs {
		if h.NICs[i].Name == name {
			return i
		}
	}
	return -1
}

// nearestGPU returns the lowest GPU index among the GPUs at NIC n's best
// known PCI distance, or a number past every index when none is known.
func nearestGPU(h *Host, n int) int {
	best, idx := DistUnknown, 1<<30
	for i := range h.GPUs {
		d := h.NICDistance(i, n)
		if d == DistUnknown {
			continue
		}
		if best == DistUnknown || d < best || (d == best && h.GPUs[i].Index < idx) {
			best, idx = d, h.GPUs[i].Index
		}
	}
	return idx
}
