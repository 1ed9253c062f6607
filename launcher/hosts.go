package launcher

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/flexlink/flexlink/internal/bounded"
)

// Host is one machine a job may run on, with its capacity.
type Host struct {
	Name string
	// Slots is how many ranks the host takes without oversubscription.
	Slots int
	// MaxSlots caps the ranks on the host even with --oversubscribe;
	// 0 means no cap.
	MaxSlots int
	// GPUs is the number of GPUs visible on the host (0: none). Parsers
	// leave it 0; the launcher fills it in for hosts it can inspect.
	GPUs int
	// NUMANodes and Sockets count the host's NUMA nodes that have CPUs
	// and its CPU packages, for --map-by ppr:N:numa|socket (0: unknown).
	// The launcher fills them in for this machine and from each agent's
	// hello.
	NUMANodes, Sockets int
	// Local is set by the launcher for this machine (under any of its
	// names); other hosts are reached through an agent (ssh or srun).
	Local bool
}

// addHost appends h to hosts, or adds its slots to an earlier entry of the
// same name (a host listed twice has the slots of both listings).
func addHost(hosts []Host, h Host) []Host {
	for i := range hosts {
		if hosts[i].Name != h.Name {
			continue
		}
		hosts[i].Slots += h.Slots
		if hosts[i].MaxSlots == 0 || h.MaxSlots == 0 {
			hosts[i].MaxSlots = 0
		} else {
			hosts[i].MaxSlots += h.MaxSlots
		}
		return hosts
	}
	return append(hosts, h)
}

// ParseHostList parses -H values: comma-separated "host[:slots]" entries.
// A host without a count has one slot; a host named more than once has the
// sum of its slots. Each element of specs may itself hold several entries.
func ParseHostList(specs []string) ([]Host, error) {
	var hosts []Host
	for _, spec := range specs {
		for _, item := range strings.Split(spec, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				return nil, fmt.Errorf("-H %q: empty host name", spec)
			}
			h := Host{Name: item, Slots: 1}
			// Split at the last colon so "host:4" works; a bare IPv6
			// address would need brackets, "[::1]:2".
			if i := strings.LastIndexByte(item, ':'); i >= 0 && !strings.HasSuffix(item, "]") {
				n, err := strconv.Atoi(item[i+1:])
				if err != nil || n < 1 {
					return nil, fmt.Errorf("-H %q: slots of %q must be a positive integer", spec, item[:i])
				}
				h.Name, h.Slots = item[:i], n
			}
			h.Name = strings.TrimSuffix(strings.TrimPrefix(h.Name, "["), "]")
			if h.Name == "" {
				return nil, fmt.Errorf("-H %q: empty host name", spec)
			}
			hosts = addHost(hosts, h)
		}
	}
	return hosts, nil
}

// ReadHostfile parses the hostfile at path (see ParseHostfile).
func ReadHostfile(path string) ([]Host, error) {
	b, err := bounded.ReadFile(path, bounded.Hostfile)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	return ParseHostfile(bytes.NewReader(b), path)
}

// ParseHostfile parses OpenMPI hostfile syntax: one host per line,
// "host [slots=N] [max_slots=M]", '#' starts a comment, blank lines are
// ignored. A host without slots= has one slot; a host listed twice adds up
// its slots. name is used in error messages, which carry the line number.
func ParseHostfile(r io.Reader, name string) ([]Host, error) {
	var hosts []Host
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		h, err := parseHostfileLine(fields)
		if err != nil {
			return nil, fmt.Errorf("hostfile %s line %d: %w", name, line, err)
		}
		hosts = addHost(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hostfile %s: %w", name, err)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("hostfile %s: no hosts", name)
	}
	return hosts, nil
}

func parseHostfileLine(fields []string) (Host, error) {
	h := Host{Name: fields[0], Slots: 1}
	if strings.Contains(h.Name, "=") {
		return h, fmt.Errorf("%q: expected a host name first", fields[0])
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return h, fmt.Errorf("%q: expected key=value (slots=N or max_slots=M)", f)
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return h, fmt.Errorf("%q: %s must be a positive integer", f, key)
		}
		if seen[key] {
			return h, fmt.Errorf("%q: %s given twice", f, key)
		}
		seen[key] = true
		switch key {
		case "slots":
			h.Slots = n
		case "max_slots":
			h.MaxSlots = n
		default:
			return h, fmt.Errorf("%q: unknown key %q (want slots or max_slots)", f, key)
		}
	}
	if h.MaxSlots != 0 && h.MaxSlots < h.Slots {
		return h, fmt.Errorf("host %s: max_slots=%d is below slots=%d", h.Name, h.MaxSlots, h.Slots)
	}
	return h, nil
}
