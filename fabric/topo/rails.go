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
// are numbered in the order of the GPUs they are assigned to (AssignNICs
// over the RDMA NICs): a GPU's primary NIC, then its other NICs, by GPU
// index; NICs assigned to no GPU follow the GPU nearest them (lowest index
// among those at the NIC's best PCI distance); bus id breaks ties. So on
// every host of a homogeneous cluster GPU i's own NIC has the same rail,
// rail i where each GPU has one. Other NICs get no rail (-1). A host
// without RDMA NICs has no rails.
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
	var rdma []int
	for n := range h.NICs {
		if h.NICs[n].RDMA {
			rdma = append(rdma, n)
		}
	}
	// key: (GPU index, 0 primary / 1 other NIC of that GPU / 2 nearest
	// only) per NIC.
	type key struct{ gpu, kind int }
	keys := map[int]key{}
	for g, nics := range AssignNICs(h, rdma) {
		for k, n := range nics {
			kk := key{h.GPUs[g].Index, min(k, 1)}
			if old, ok := keys[n]; !ok || kk.gpu < old.gpu || (kk.gpu == old.gpu && kk.kind < old.kind) {
				keys[n] = kk
			}
		}
	}
	for _, n := range rdma {
		if _, ok := keys[n]; !ok {
			keys[n] = key{nearestGPU(h, n), 2}
		}
	}
	sort.SliceStable(rdma, func(a, b int) bool {
		ka, kb := keys[rdma[a]], keys[rdma[b]]
		if ka.gpu != kb.gpu {
			return ka.gpu < kb.gpu
		}
		if ka.kind != kb.kind {
			return ka.kind < kb.kind
		}
		return h.NICs[rdma[a]].BusID < h.NICs[rdma[b]].BusID
	})
	for r, n := range rdma {
		h.NICs[n].Rail = r
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
