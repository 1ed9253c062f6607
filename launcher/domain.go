package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
)

// DomainSlot is where --map-by ppr:N:numa|socket put a rank inside its
// host: the Index-th NUMA node (among those with CPUs, in node order) or
// socket (in package-id order), as the Rank-th of the Size ranks there.
type DomainSlot struct {
	Unit  Domain `json:"unit,omitempty"`
	Index int    `json:"index"`
	Rank  int    `json:"rank"`
	Size  int    `json:"size"`
}

// String is "numa node 1" or "socket 0" (the Index-th of its kind).
func (d DomainSlot) String() string {
	return d.Unit.name() + " " + strconv.Itoa(d.Index)
}

// name is the unit as prose: "node", "numa node" or "socket".
func (d Domain) name() string {
	switch d {
	case PerNUMA:
		return "numa node"
	case PerSocket:
		return "socket"
	}
	return "node"
}

// units is how many units of d the host has: 1 for a whole host.
func (h Host) units(d Domain) (int, error) {
	n := 1
	switch d {
	case PerNUMA:
		n = h.NUMANodes
	case PerSocket:
		n = h.Sockets
	}
	if n < 1 {
		return 0, fmt.Errorf("host %s: number of %ss unknown (ppr:N:%s needs it; FLEXLINK_TOPO_FILE or /sys/devices/system gives it)", h.Name, d.name(), d)
	}
	return n, nil
}

// setDomains records in each placement the unit that ppr:perUnit:unit put
// it in: local rank l of a host is in unit l/perUnit.
func setDomains(plan []Placement, unit Domain, perUnit int) {
	for i, p := range plan {
		idx := p.LocalRank / perUnit
		plan[i].In = DomainSlot{Unit: unit, Index: idx, Rank: p.LocalRank % perUnit, Size: min(perUnit, p.LocalSize-idx*perUnit)}
	}
}

// CountDomains counts this host's NUMA nodes with CPUs and its sockets
// from sysfs under sysRoot ("" is /sys), or the NUMA nodes of the
// topology file when env names one (FLEXLINK_TOPO_FILE or NCCL_TOPO_FILE,
// topoFile): the same sources as binding reads. A count it cannot read is 0.
func CountDomains(env settings.Env, sysRoot string) (numaNodes, sockets int) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	nodes, _ := numaCPUs(env, sysRoot)
	sock, _ := socketCPUs(sysRoot)
	return len(nodes), len(sock)
}

// numaCPUs is the CPUs of each NUMA node with CPUs, in node order, with
// the node ids: from the topology file when env names one (topoFile),
// else sysRoot's devices/system/node/node*/cpulist.
func numaCPUs(env settings.Env, sysRoot string) (cpus [][]int, ids []int) {
	if f := topoFile(env); f != "" {
		h, err := topo.Load(f)
		if err != nil {
			return nil, nil
		}
		for _, n := range h.NUMA {
			if c, err := ParseCPUList(n.CPUs); err == nil && len(c) > 0 {
				cpus, ids = append(cpus, c), append(ids, n.ID)
			}
		}
		return cpus, ids
	}
	dirs, _ := filepath.Glob(filepath.Join(sysRoot, "devices/system/node/node[0-9]*"))
	for _, d := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cpulist"))
		if err != nil {
			continue
		}
		if c, err := ParseCPUList(string(b)); err == nil && len(c) > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		b, _ := os.ReadFile(filepath.Join(sysRoot, "devices/system/node", "node"+strconv.Itoa(id), "cpulist"))
		c, _ := ParseCPUList(string(b))
		cpus = append(cpus, c)
	}
	return cpus, ids
}

// socketCPUs is the CPUs of each socket in package-id order, read from
// sysRoot's devices/system/cpu/cpu*/topology/physical_package_id.
func socketCPUs(sysRoot string) ([][]int, []int) {
	files, _ := filepath.Glob(filepath.Join(sysRoot, "devices/system/cpu/cpu[0-9]*/topology/physical_package_id"))
	byPkg := map[int][]int{}
	for _, f := range files {
		cpu, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(f))), "cpu"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pkg, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		byPkg[pkg] = append(byPkg[pkg], cpu)
	}
	ids := make([]int, 0, len(byPkg))
	for id := range byPkg {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([][]int, len(ids))
	for i, id := range ids {
		out[i] = slices.Sorted(slices.Values(byPkg[id]))
	}
	return out, ids
}

// bindInDomain binds a rank that ppr:N:numa|socket placed in p.In:
//   - auto (the default) and numa under ppr:N:numa: all of the unit's CPUs;
//   - auto under ppr:N:socket: all of the socket's CPUs;
//   - numa under ppr:N:socket: the socket's NUMA nodes round-robin by the
//     rank's place in the socket (p.In.Rank);
//   - core: the unit's CPUs split into p.In.Size contiguous shares, as
//     BindCore splits a host's, share p.In.Rank.
//
// CPUs flexrun may not use are left out (unless that leaves none). A unit
// the host does not have is an error that names both counts.
func bindInDomain(mode BindTo, t CPUTopology, p Placement) (Binding, error) {
	b := unbound()
	var unitCPUs []int
	switch p.In.Unit {
	case PerNUMA:
		var nodes []int // indexes into t.NUMA of nodes with CPUs
		for i, c := range t.NUMA {
			if len(c) > 0 {
				nodes = append(nodes, i)
			}
		}
		if p.In.Index >= len(nodes) {
			return b, fmt.Errorf("bind rank %d on %s: planned on numa node #%d but the host has %d numa nodes with CPUs (%s)", p.Rank, p.Host, p.In.Index, len(nodes), t.Source)
		}
		unitCPUs, b.NUMA = t.NUMA[nodes[p.In.Index]], t.NUMAIDs[nodes[p.In.Index]]
	case PerSocket:
		if p.In.Index >= len(t.Sockets) {
			return b, fmt.Errorf("bind rank %d on %s: planned on socket #%d but the host has %d sockets", p.Rank, p.Host, p.In.Index, len(t.Sockets))
		}
		unitCPUs, b.Socket = t.Sockets[p.In.Index], t.SocketIDs[p.In.Index]
		if mode == BindNUMA {
			return socketNUMA(t, p, unitCPUs)
		}
	}
	cpus := intersect(unitCPUs, t.CPUs)
	if len(cpus) == 0 {
		cpus = slices.Clone(unitCPUs)
	}
	if mode == BindCore {
		n, size := len(cpus), max(p.In.Size, 1)
		if size > n {
			cpus = []int{cpus[p.In.Rank%n]}
		} else {
			cpus = slices.Clone(cpus[p.In.Rank*n/size : (p.In.Rank+1)*n/size])
		}
	}
	b.CPUs = cpus
	return b, nil
}

// socketNUMA is --bind-to numa under ppr:N:socket: the NUMA nodes whose
// CPUs lie in the socket, round-robin by the rank's place in it.
func socketNUMA(t CPUTopology, p Placement, socket []int) (Binding, error) {
	var nodes []int
	for i, c := range t.NUMA {
		if len(c) > 0 && len(intersect(c, socket)) > 0 {
			nodes = append(nodes, i)
		}
	}
	if len(nodes) == 0 {
		return unbound(), fmt.Errorf("bind rank %d on %s to a numa node of socket #%d: none found (%s)", p.Rank, p.Host, p.In.Index, t.Source)
	}
	i := nodes[p.In.Rank%len(nodes)]
	cpus := intersect(t.NUMA[i], t.CPUs)
	if len(cpus) == 0 {
		cpus = slices.Clone(t.NUMA[i])
	}
	return Binding{CPUs: cpus, NUMA: t.NUMAIDs[i], Socket: -1}, nil
}
