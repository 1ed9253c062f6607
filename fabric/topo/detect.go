package topo

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Options configures detection.
type Options struct {
	// SysRoot is the sysfs root; empty means /sys. Tests point it at a
	// fake tree.
	SysRoot string
	// Hostname names the host; empty means os.Hostname().
	Hostname string
}

// detectBase reads what does not need NVML: host name, NUMA nodes, NICs.
func detectBase(opt Options) (*Host, sysfs, error) {
	s := sysfs{root: opt.SysRoot}
	if s.root == "" {
		s.root = "/sys"
	}
	h := &Host{Hostname: opt.Hostname, Source: "detect", GPUs: []GPU{}, NICs: []NIC{}}
	if h.Hostname == "" {
		name, err := os.Hostname()
		if err != nil {
			return nil, s, fmt.Errorf("detect topology: host name: %w", err)
		}
		h.Hostname = name
	}
	numa, err := s.numa()
	if err != nil {
		h.Unknown = append(h.Unknown, "numa nodes: "+err.Error())
	}
	h.NUMA = numa
	nics, why := s.nics(len(numa))
	h.NICs = append(h.NICs, nics...)
	h.Unknown = append(h.Unknown, why...)
	return h, s, nil
}

// finish orders GPUs by index and assigns default rails.
func finish(h *Host) (*Host, error) {
	sort.SliceStable(h.GPUs, func(i, j int) bool { return h.GPUs[i].Index < h.GPUs[j].Index })
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("detect topology: %w", err)
	}
	if err := AssignRails(h, nil); err != nil {
		return nil, err
	}
	return h, nil
}

// CPUList formats a CPU bitmask (word i holds CPUs 64i..64i+63) as a Linux
// cpulist ("0-3,8").
func CPUList(mask []uint64) string {
	var parts []string
	start := -1
	n := len(mask) * 64
	for c := 0; c <= n; c++ {
		on := c < n && mask[c/64]&(1<<(c%64)) != 0
		switch {
		case on && start < 0:
			start = c
		case !on && start >= 0:
			if c-1 == start {
				parts = append(parts, strconv.Itoa(start))
			} else {
				parts = append(parts, fmt.Sprintf("%d-%d", start, c-1))
			}
			start = -1
		}
	}
	return strings.Join(parts, ",")
}
