package launcher

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
)

// BindTo says which CPUs a rank may run on (mpirun's --bind-to).
type BindTo string

const (
	// BindNone leaves the rank on every CPU flexrun may use (the default).
	BindNone BindTo = "none"
	// BindCore gives each rank of a host a distinct, contiguous share of
	// the CPUs flexrun may use, spread evenly over the host's ranks.
	BindCore BindTo = "core"
	// BindNUMA gives a rank the CPUs of one NUMA node: its GPU's node when
	// the topology knows it, else the nodes round-robin by local rank.
	BindNUMA BindTo = "numa"
	// BindGPU gives a rank with a GPU the CPUs of its GPU's NUMA node, and
	// leaves a rank unbound when it has no GPU or the node is unknown.
	BindGPU BindTo = "gpu"
	// BindAuto is the default: BindGPU when the host's ranks have GPUs,
	// BindNone otherwise; it never fails a job (an unreadable topology
	// leaves the ranks unbound).
	BindAuto BindTo = "auto"
)

// ParseBindTo accepts auto, none (or ""), core, numa and gpu.
func ParseBindTo(s string) (BindTo, error) {
	switch strings.ToLower(s) {
	case "auto":
		return BindAuto, nil
	case "gpu":
		return BindGPU, nil
	case "", "none":
		return BindNone, nil
	case "core", "cores":
		return BindCore, nil
	case "numa":
		return BindNUMA, nil
	}
	return "", fmt.Errorf("--bind-to %q: want auto, none, core, numa or gpu", s)
}

// CPUTopology is what binding needs to know about a host.
type CPUTopology struct {
	CPUs    []int   // CPUs flexrun may use (its own affinity), ascending
	NUMA    [][]int // CPUs of each NUMA node, in node order (nil: unknown)
	NUMAIDs []int   // the node id of each NUMA entry
	GPUNUMA []int   // NUMA node id of GPU i; -1: unknown
	Source  string  // where NUMA and GPUNUMA came from, for messages
	// Sockets and SocketIDs are the CPUs and package id of each socket,
	// read only for --map-by ppr:N:socket (nil: not read).
	Sockets   [][]int
	SocketIDs []int
}

// Binding is where one rank was bound.
type Binding struct {
	CPUs   []int // nil: not bound
	NUMA   int   // the node id when bound to a NUMA node; -1 otherwise
	Socket int   // the package id when bound to a socket; -1 otherwise
}

// unbound is the Binding of a rank left on every CPU.
func unbound() Binding { return Binding{NUMA: -1, Socket: -1} }

// String is the CPU list in Linux cpulist form ("0-3,8"), or "unbound".
func (b Binding) String() string {
	if b.CPUs == nil {
		return "unbound"
	}
	s := FormatCPUList(b.CPUs)
	if b.NUMA >= 0 {
		s += " (numa node " + strconv.Itoa(b.NUMA) + ")"
	} else if b.Socket >= 0 {
		s += " (socket " + strconv.Itoa(b.Socket) + ")"
	}
	return s
}

// Bind decides the CPUs of rank p under mode. It is pure: the same
// topology and placement give the same CPUs.
//
// BindCore splits t.CPUs into p.LocalSize contiguous shares whose sizes
// differ by at most one; with more ranks than CPUs each rank gets one CPU,
// CPUs reused round-robin. BindNUMA picks the node of p's GPU when known,
// else node LocalRank mod the number of nodes that have CPUs; the rank gets
// that node's CPUs that flexrun may use (all of them if none is).
//
// A rank that --map-by ppr:N:numa|socket put in a NUMA node or socket
// (p.In) is bound inside it instead, under auto, core and numa: see
// bindInDomain.
func Bind(mode BindTo, t CPUTopology, p Placement) (Binding, error) {
	if p.In.Unit == PerNUMA || p.In.Unit == PerSocket {
		switch mode {
		case BindAuto, BindCore, BindNUMA:
			return bindInDomain(mode, t, p)
		}
	}
	switch mode {
	case "", BindNone:
		return unbound(), nil
	case BindCore:
		n, size := len(t.CPUs), max(p.LocalSize, 1)
		if n == 0 {
			return Binding{}, fmt.Errorf("bind rank %d to cores on %s: no usable CPU", p.Rank, p.Host)
		}
		if size > n {
			return Binding{CPUs: []int{t.CPUs[p.LocalRank%n]}, NUMA: -1, Socket: -1}, nil
		}
		lo, hi := p.LocalRank*n/size, (p.LocalRank+1)*n/size
		return Binding{CPUs: slices.Clone(t.CPUs[lo:hi]), NUMA: -1, Socket: -1}, nil
	case BindNUMA:
		return bindNUMA(t, p)
	case BindGPU, BindAuto:
		return bindGPU(t, p), nil
	}
	return Binding{}, fmt.Errorf("bind rank %d: unknown --bind-to %q", p.Rank, mode)
}

func bindNUMA(t CPUTopology, p Placement) (Binding, error) {
	var nodes []int // indexes into t.NUMA of nodes with CPUs
	for i, cpus := range t.NUMA {
		if len(cpus) > 0 {
			nodes = append(nodes, i)
		}
	}
	if len(nodes) == 0 {
		return Binding{}, fmt.Errorf("bind rank %d to a numa node on %s: no NUMA node with CPUs found (%s)", p.Rank, p.Host, t.Source)
	}
	pick := nodes[p.LocalRank%len(nodes)]
	if p.GPU >= 0 && p.GPU < len(t.GPUNUMA) && t.GPUNUMA[p.GPU] >= 0 {
		if i := slices.Index(t.NUMAIDs, t.GPUNUMA[p.GPU]); i >= 0 && len(t.NUMA[i]) > 0 {
			pick = i
		}
	}
	cpus := intersect(t.NUMA[pick], t.CPUs)
	if len(cpus) == 0 {
		cpus = slices.Clone(t.NUMA[pick])
	}
	return Binding{CPUs: cpus, NUMA: t.NUMAIDs[pick], Socket: -1}, nil
}

// bindGPU is the CPUs of p's GPU's NUMA node (those flexrun may use, else
// all of the node's), or no binding when p has no GPU or its node is
// unknown.
func bindGPU(t CPUTopology, p Placement) Binding {
	if p.GPU < 0 || p.GPU >= len(t.GPUNUMA) || t.GPUNUMA[p.GPU] < 0 {
		return unbound()
	}
	i := slices.Index(t.NUMAIDs, t.GPUNUMA[p.GPU])
	if i < 0 || len(t.NUMA[i]) == 0 {
		return unbound()
	}
	cpus := intersect(t.NUMA[i], t.CPUs)
	if len(cpus) == 0 {
		cpus = slices.Clone(t.NUMA[i])
	}
	return Binding{CPUs: cpus, NUMA: t.NUMAIDs[i], Socket: -1}
}

func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// LoadCPUTopology reads this host's topology for mode: the CPUs of this
// process's affinity mask, and for BindNUMA the NUMA nodes and the GPUs'
// nodes from the topology file in env when set (topoFile), else detected
// (NUMA nodes from sysRoot/devices/system/node, GPUs through NVML when
// present). sysRoot "" is /sys.
func LoadCPUTopology(mode BindTo, env settings.Env, sysRoot string) (CPUTopology, error) {
	return loadTopology(mode, "", env, sysRoot)
}

// topoFile is the topology file the ranks' environment env names, as
// the ranks themselves read it: FLEXLINK_TOPO_FILE, else NCCL_TOPO_FILE
// (a job written for NCCL; settings.WithNCCL); "" when neither is set.
// Binding then follows the same NUMA nodes and GPUs as the ranks do.
func topoFile(env settings.Env) string {
	return settings.WithNCCL(env).String("FLEXLINK_TOPO_FILE")
}

// loadTopology is LoadCPUTopology for ranks placed per unit (ppr:N:unit):
// the NUMA nodes are read for PerNUMA, and the sockets for PerSocket.
func loadTopology(mode BindTo, unit Domain, env settings.Env, sysRoot string) (CPUTopology, error) {
	var t CPUTopology
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return t, fmt.Errorf("read cpu affinity: %w", err)
	}
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			t.CPUs = append(t.CPUs, c)
		}
	}
	if unit == PerSocket {
		root := sysRoot
		if root == "" {
			root = "/sys"
		}
		if t.Sockets, t.SocketIDs = socketCPUs(root); len(t.Sockets) == 0 {
			return t, fmt.Errorf("topology for --map-by ppr:N:socket: no socket found under %s/devices/system/cpu", root)
		}
	}
	if mode != BindNUMA && mode != BindGPU && mode != BindAuto && unit != PerNUMA {
		return t, nil
	}
	var h *topo.Host
	var err error
	if f := topoFile(env); f != "" {
		h, err = topo.Load(f)
		t.Source = f
	} else {
		h, err = topo.Detect(topo.Options{SysRoot: sysRoot})
		t.Source = "detected"
	}
	if err != nil {
		return t, fmt.Errorf("topology for --bind-to numa: %w", err)
	}
	for _, n := range h.NUMA {
		cpus, err := ParseCPUList(n.CPUs)
		if err != nil {
			return t, fmt.Errorf("topology %s: numa node %d: %w", t.Source, n.ID, err)
		}
		t.NUMA, t.NUMAIDs = append(t.NUMA, cpus), append(t.NUMAIDs, n.ID)
	}
	for _, g := range h.GPUs {
		for len(t.GPUNUMA) <= g.Index {
			t.GPUNUMA = append(t.GPUNUMA, -1)
		}
		if g.Index >= 0 {
			t.GPUNUMA[g.Index] = g.NUMANode
		}
	}
	return t, nil
}

// ParseCPUList reads a Linux cpulist ("0-3,8,10-11").
func ParseCPUList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if a < 0 || b < a {
			return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// FormatCPUList writes ascending CPUs as a Linux cpulist.
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// cpuSet converts CPUs to an affinity mask.
func cpuSet(cpus []int) unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return set
}

// bindRanks decides the binding of each of ranks (all on this host) and,
// when report is set, writes one line per rank to it (--report-bindings).
func bindRanks(mode BindTo, env []string, ranks []Placement, report func(line string)) (map[int]Binding, error) {
	unit := Domain("")
	if len(ranks) > 0 {
		unit = ranks[0].In.Unit // one mapping for the whole job
	}
	if mode == BindAuto && unit == "" && !slices.ContainsFunc(ranks, func(p Placement) bool { return p.GPU >= 0 }) {
		mode = BindNone // no GPUs here: nothing to bind to
	}
	if mode == "" || mode == BindNone || len(ranks) == 0 {
		if report != nil {
			for _, p := range ranks {
				report(BindingLine(p, unbound()))
			}
		}
		return nil, nil
	}
	t, err := loadTopology(mode, unit, envLookup(env), "")
	if err != nil && mode == BindAuto && unit == "" {
		t, err = CPUTopology{}, nil // the default never fails a job: ranks stay unbound
	}
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", ranks[0].Host, err)
	}
	out := make(map[int]Binding, len(ranks))
	for _, p := range ranks {
		b, err := Bind(mode, t, p)
		if err != nil {
			return nil, err
		}
		out[p.Rank] = b
		if report != nil {
			report(BindingLine(p, b))
		}
	}
	return out, nil
}

// BindingLine is the --report-bindings line of one rank, e.g.
// "flexrun: [node1] rank 3 (local 1) bound to cpus 4-7 (numa node 1)".
func BindingLine(p Placement, b Binding) string {
	if b.CPUs == nil {
		return fmt.Sprintf("flexrun: [%s] rank %d (local %d) not bound", p.Host, p.Rank, p.LocalRank)
	}
	return fmt.Sprintf("flexrun: [%s] rank %d (local %d) bound to cpus %s", p.Host, p.Rank, p.LocalRank, b)
}

// localBindings binds the ranks that run on this machine; ranks on other
// hosts are bound by their agents.
func (job Job) localBindings(plan []Placement, hosts []Host, env []string) (map[int]Binding, error) {
	var mine []Placement
	for _, p := range plan {
		if isLocalHost(hosts, p.Host) {
			mine = append(mine, p)
		}
	}
	var report func(string)
	if job.ReportBindings {
		report = func(line string) { fmt.Fprintln(job.Stderr, line) }
	}
	return bindRanks(job.BindTo, env, mine, report)
}
