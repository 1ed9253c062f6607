package settings

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Alias is an NCCL_* environment variable whose meaning is a flexlink
// setting: a job written for NCCL that sets it gets the same effect here.
// The FLEXLINK_ name wins when both are set; a bad NCCL value is an error
// naming the NCCL variable (Validate), like a bad FLEXLINK value.
type Alias struct {
	NCCL    string // NCCL's variable, NCCL_...
	Setting string // the FLEXLINK_ setting it stands for
	Doc     string // how its values translate, one line for docs/SETTINGS.md
	// value translates a non-empty NCCL value (get reads other variables,
	// for the pairs NCCL multiplies); "" means that the value asks for
	// nothing flexlink does not already do, leaving the setting to the
	// next alias or its default.
	value func(get Env, v string) (string, error)
}

// NCCLAliases lists every NCCL_* variable flexlink honours through the
// registry, in the order they are consulted for one setting (the first
// that yields a value wins). NCCL_DEBUG, NCCL_DEBUG_SUBSYS and
// NCCL_DEBUG_FILE are honoured by the C library's logger (ncclHonoured).
var NCCLAliases = []Alias{
	{"NCCL_SOCKET_IFNAME", "FLEXLINK_SOCKET_IFNAME", "the same syntax (prefixes, `^` excludes, `=` exact); also the network transport's interfaces, since FLEXLINK_NET_IFNAME falls back on it", same},
	{"NCCL_IB_HCA", "FLEXLINK_NET_DEVICES", "a list of HCAs: `=` dropped, `mlx5_0:1` kept, a name without a port is its port 1 (`mlx5_0` → `mlx5_0:1`); a `^` exclusion has no effect (flexlink takes the devices to use, exactly) and gets an INFO line", ibHCA},
	{"NCCL_NET", "FLEXLINK_NET", "`Socket` → `tcp`, `IB` → `ucx` (any case); another (a plugin's name) has no effect and gets an INFO line", ncclNet},
	{"NCCL_IB_DISABLE", "FLEXLINK_NET", "`1` → `tcp` (no RDMA provider); `0` → no change", onWord("tcp")},
	{"NCCL_P2P_DISABLE", "FLEXLINK_GPU_PATH", "`1` → `staged` (GPU buffers through pinned host memory, no peer access between GPUs); `0` → no change", onWord("staged")},
	{"NCCL_SHM_DISABLE", "FLEXLINK_TRANSPORT", "`1` → `net` (ranks of one host talk through the network transport, not shared memory); `0` → no change", onWord("net")},
	{"NCCL_PXN_DISABLE", "FLEXLINK_PXN", "`1` → `0` (each rank sends from its own NIC, no relay); `0` → no change (NCCL_P2P_PXN_LEVEL, else flexlink's default `off`)", onWord("0")},
	{"NCCL_P2P_PXN_LEVEL", "FLEXLINK_PXN", "`0`, `1`, `2` → the same level", ncclPXNLevel},
	{"NCCL_NSOCKS_PERTHREAD", "FLEXLINK_NET_SOCKETS", "sockets per connection = NCCL_NSOCKS_PERTHREAD × NCCL_SOCKET_NTHREADS (each 1 when unset; at most 64, NCCL's limit too)", nsocks("NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS")},
	{"NCCL_SOCKET_NTHREADS", "FLEXLINK_NET_SOCKETS", "as NCCL_NSOCKS_PERTHREAD (used alone when that is unset)", nsocks("NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD")},
	{"NCCL_BUFFSIZE", "FLEXLINK_SHM_RING_BYTES", "bytes of the buffer between two ranks (a plain integer; both default to 4 MiB); flexlink's network and GPU paths have no such buffer", buffSize},
	{"NCCL_TOPO_FILE", "FLEXLINK_TOPO_FILE", "the same file (NCCL's XML is read)", same},
}

// ncclHonoured are NCCL variables honoured outside the registry: the C
// library's logger reads them (docs/LOGGING.md).
var ncclHonoured = []string{"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}

// ncclWhy gives the reason some common NCCL variables do nothing here,
// for their INFO line.
var ncclWhy = map[string]string{
	"NCCL_NET_GDR_LEVEL":       "no GPUDirect RDMA path yet: GPU buffers cross hosts through pinned host memory",
	"NCCL_NET_GDR_READ":        "no GPUDirect RDMA path yet: GPU buffers cross hosts through pinned host memory",
	"NCCL_ALGO":                "its algorithms are chosen by FLEXLINK_ALGO and the GPU settings (docs/SETTINGS.md)",
	"NCCL_PROTO":               "it has no LL/LL128/Simple protocols",
	"NCCL_TOPO_DUMP_FILE":      "FLEXLINK_TOPO_DUMP_FILE writes JSON or YAML, not NCCL's XML",
	"NCCL_HOSTID":              "FLEXLINK_HOSTNAME names a host (flexrun sets it per host)",
	"NCCL_P2P_LEVEL":           "FLEXLINK_GPU_PATH=staged turns peer access off, FLEXLINK_LINKS restricts the links",
	"NCCL_IB_TIMEOUT":          "FLEXLINK_NET_TIMEOUT bounds a silent peer of the network transport",
	"NCCL_MAX_NCHANNELS":       "it has no channels; FLEXLINK_GPU_FLAG_BLOCKS bounds the flag kernels' blocks",
	"NCCL_MIN_NCHANNELS":       "it has no channels; FLEXLINK_GPU_FLAG_BLOCKS bounds the flag kernels' blocks",
	"NCCL_NVLS_ENABLE":         "it has no NVLink SHARP path",
	"NCCL_COLLNET_ENABLE":      "it has no CollNet path",
	"NCCL_CUMEM_ENABLE":        "it allocates with cuMemAlloc",
	"NCCL_LAUNCH_MODE":         "it launches no NCCL kernels",
	"NCCL_CROSS_NIC":           "NICs pair across hosts by subnet (docs/NET.md)",
	"NCCL_COMM_BLOCKING":       "ncclCommInitRankConfig's blocking field is honoured; the variable is not",
	"NCCL_IGNORE_CPU_AFFINITY": "flexrun --bind-to decides the ranks' CPUs",
}

// WithNCCL is env with the NCCL aliases applied: a FLEXLINK_ setting that
// env leaves unset (or empty) takes the value of the first of its NCCL
// aliases that env sets, translated. An NCCL value that does not
// translate leaves the setting at its default; Validate reports it.
func WithNCCL(env Env) Env {
	return func(name string) (string, bool) {
		if v, ok := env(name); ok && v != "" || !strings.HasPrefix(name, "FLEXLINK_") {
			return v, ok
		}
		if v, _, err := fromNCCL(env, name); err == nil && v != "" {
			return v, true
		}
		return env(name)
	}
}

// fromNCCL is the value the NCCL aliases of setting give and the alias
// that gave it ("" when none does); an error names the NCCL variable.
func fromNCCL(env Env, setting string) (string, string, error) {
	for _, a := range NCCLAliases {
		if a.Setting != setting {
			continue
		}
		raw, ok := env(a.NCCL)
		if !ok || strings.TrimSpace(raw) == "" {
			continue
		}
		v, err := a.value(env, strings.TrimSpace(raw))
		if _, ok := err.(noEffect); ok {
			continue
		}
		if err == nil && v != "" {
			err = lookup(setting).Kind.Check(v)
		}
		if err != nil {
			return "", a.NCCL, fmt.Errorf("%s=%q (read as %s): %w", a.NCCL, raw, setting, err)
		}
		if v != "" {
			return v, a.NCCL, nil
		}
	}
	return "", "", nil
}

// checkNCCL checks every NCCL alias env sets, whether or not its FLEXLINK
// setting wins, so that a typo in a job's NCCL environment is never
// silent.
func checkNCCL(env Env) []error {
	var errs []error
	for _, a := range NCCLAliases {
		raw, ok := env(a.NCCL)
		if !ok || strings.TrimSpace(raw) == "" {
			continue
		}
		v, err := a.value(env, strings.TrimSpace(raw))
		if _, ok := err.(noEffect); ok {
			continue // NCCLNotes says so
		}
		if err == nil && v != "" {
			if err = lookup(a.Setting).Kind.Check(v); err == errBad {
				err = fmt.Errorf("gives %s=%q: want %s", a.Setting, v, lookup(a.Setting).Kind.Allowed)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", a.NCCL, raw, err))
		}
	}
	return errs
}

// NCCLNotes returns one line for each NCCL_* variable of environ
// ("NAME=value") that flexlink neither maps nor honours: "NCCL_ALGO has
// no effect on flexlink (...)". A program logs them at INFO once
// (NCCLNotesOnce). nccl-tests' own NCCL_TESTS_* variables are not NCCL's.
func NCCLNotes(environ []string) []string {
	var names []string
	env := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var out []string
	for _, a := range NCCLAliases {
		raw := strings.TrimSpace(env[a.NCCL])
		if raw == "" {
			continue
		}
		if _, err := a.value(Map(env), raw); err != nil {
			if ne, ok := err.(noEffect); ok {
				out = append(out, fmt.Sprintf("%s=%s has no effect on flexlink (%s)", a.NCCL, raw, ne.why))
			}
		}
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "NCCL_") || strings.HasPrefix(name, "NCCL_TESTS_") ||
			slices.Contains(names, name) || slices.Contains(ncclHonoured, name) || IsNCCLAlias(name) {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, n := range names {
		line := n + " has no effect on flexlink"
		if why := ncclWhy[n]; why != "" {
			line += " (" + why + ")"
		}
		out = append(out, line)
	}
	return out
}

// noEffect is a well-formed NCCL value that asks for something flexlink
// does not do (an NCCL_IB_HCA exclusion, an NCCL net plugin): the setting
// is left alone and NCCLNotes says so, rather than failing a job whose
// environment was written for NCCL.
type noEffect struct{ why string }

func (n noEffect) Error() string { return n.why }

var notesOnce sync.Once

// NCCLNotesOnce is NCCLNotes the first time a process calls it, nil
// after: a process that makes many communicators (PyTorch's groups) says
// it once.
func NCCLNotesOnce(environ []string) []string {
	var out []string
	notesOnce.Do(func() { out = NCCLNotes(environ) })
	return out
}

// IsNCCLAlias reports whether name is an NCCL variable of NCCLAliases.
func IsNCCLAlias(name string) bool {
	return slices.ContainsFunc(NCCLAliases, func(a Alias) bool { return a.NCCL == name })
}

// NCCLMarkdown renders NCCLAliases as docs/SETTINGS.md's NCCL table.
func NCCLMarkdown() string {
	var b strings.Builder
	b.WriteString("| NCCL variable | flexlink setting | values |\n|---|---|---|\n")
	for _, a := range NCCLAliases {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", a.NCCL, a.Setting, a.Doc)
	}
	return b.String()
}

func same(_ Env, v string) (string, error) { return v, nil }

// onWord maps NCCL's 1 (on) to word and 0 (off) to no change.
func onWord(word string) func(Env, string) (string, error) {
	return func(_ Env, v string) (string, error) {
		switch v {
		case "1":
			return word, nil
		case "0":
			return "", nil
		}
		return "", fmt.Errorf("want 0 or 1")
	}
}

func ncclNet(_ Env, v string) (string, error) {
	switch strings.ToLower(v) {
	case "socket":
		return "tcp", nil
	case "ib":
		return "ucx", nil
	}
	return "", noEffect{"flexlink loads no NCCL net plugin; FLEXLINK_NET picks tcp or ucx"}
}

func ncclPXNLevel(_ Env, v string) (string, error) {
	if v == "0" || v == "1" || v == "2" {
		return v, nil
	}
	return "", fmt.Errorf("want 0, 1 or 2")
}

func ibHCA(_ Env, v string) (string, error) {
	if strings.HasPrefix(v, "^") {
		return "", noEffect{"exclusions are not supported: name the HCAs to use, or set FLEXLINK_NET_DEVICES"}
	}
	var out []string
	for d := range strings.SplitSeq(strings.TrimPrefix(v, "="), ",") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		name, port, hasPort := strings.Cut(d, ":")
		if name == "" || hasPort && port == "" {
			return "", fmt.Errorf("want HCA[:port],... (like mlx5_0:1)")
		}
		if !hasPort {
			port = "1"
		}
		if _, err := strconv.Atoi(port); err != nil {
			return "", fmt.Errorf("port %q of %s is not a number", port, name)
		}
		out = append(out, name+":"+port)
	}
	if len(out) == 0 {
		return "", fmt.Errorf("no HCA named")
	}
	return strings.Join(out, ","), nil
}

// nsocks multiplies NCCL's two socket counts, self first (the other is 1
// when unset or bad: its own alias reports it).
func nsocks(self, other string) func(Env, string) (string, error) {
	return func(get Env, v string) (string, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return "", fmt.Errorf("want an integer of 1 or more")
		}
		m := 1
		if o, ok := get(other); ok {
			if k, err := strconv.Atoi(strings.TrimSpace(o)); err == nil && k >= 1 {
				m = k
			}
		}
		if n*m > 64 {
			return "", fmt.Errorf("%s × %s = %d sockets: at most 64", self, other, n*m)
		}
		return strconv.Itoa(n * m), nil
	}
}

func buffSize(_ Env, v string) (string, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return "", fmt.Errorf("want a size in bytes (a plain integer)")
	}
	return v, nil
}
