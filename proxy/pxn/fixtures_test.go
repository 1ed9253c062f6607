package pxn

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flexlink/flexlink/fabric/topo"
)

// loadHost reads hostfiles/topo/<name>.
func loadHost(t *testing.T, name string) *topo.Host {
	t.Helper()
	h, err := topo.Load(filepath.Join("..", "..", "hostfiles", "topo", name))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// rename returns a copy of h called name whose slices may be changed
// without touching h.
func rename(h *topo.Host, name string) *topo.Host {
	c := *h
	c.Hostname = name
	c.GPUs = slices.Clone(h.GPUs)
	c.NICs = slices.Clone(h.NICs)
	return &c
}

// dropNIC removes the named NIC; the other NICs keep their rails (a NIC
// that failed or is not cabled).
func dropNIC(t *testing.T, h *topo.Host, name string) *topo.Host {
	t.Helper()
	i := slices.IndexFunc(h.NICs, func(n topo.NIC) bool { return n.Name == name })
	if i < 0 {
		t.Fatalf("host %s has no NIC %s", h.Hostname, name)
	}
	h.NICs = slices.Delete(h.NICs, i, i+1)
	return h
}

// keepGPUs keeps the first n GPUs and the NICs nearest to them (and the
// railless ones): a smaller host of the same make.
func keepGPUs(h *topo.Host, n int) *topo.Host {
	h.GPUs = h.GPUs[:n]
	var nics []topo.NIC
	for _, c := range h.NICs {
		if c.Rail < n {
			nics = append(nics, c)
		}
	}
	h.NICs = nics
	return h
}

// cpuHost is a host without GPUs with one NIC per rail, like a host of the
// emulated cluster (scripts/testcluster): NIC ethR on rail R.
func cpuHost(name string, rails int) *topo.Host {
	h := &topo.Host{Hostname: name, GPUs: []topo.GPU{}, NoGPU: "test: CPU host"}
	for r := range rails {
		h.NICs = append(h.NICs, topo.NIC{Name: fmt.Sprintf("eth%d", r), Netdev: fmt.Sprintf("eth%d", r), NUMANode: -1, Rail: r})
	}
	return h
}

// world places ranks host by host: one per GPU on hosts with GPUs
// (rank = first rank of the host + GPU position), cpuRanks per host
// without GPUs.
func world(t *testing.T, cpuRanks int, hosts ...*topo.Host) *topo.World {
	t.Helper()
	var m []topo.Member
	for _, h := range hosts {
		if len(h.GPUs) == 0 {
			for range cpuRanks {
				m = append(m, topo.Member{Host: h, GPU: -1})
			}
			continue
		}
		for _, g := range h.GPUs {
			m = append(m, topo.Member{Host: h, GPU: g.Index})
		}
	}
	w, err := topo.NewWorld(m)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// copies is n renamed copies of h: host0, host1, ...
func copies(h *topo.Host, n int) []*topo.Host {
	out := make([]*topo.Host, n)
	for i := range out {
		out[i] = rename(h, fmt.Sprintf("host%d", i))
	}
	return out
}
