package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// sysfs reads a sysfs tree rooted at root ("/sys", or a fake tree in
// tests). Symbolic links inside it must be relative, as the kernel's are.
type sysfs struct{ root string }

var bdfRE = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// NormBusID normalises a PCI bus id to lower case with a 4-digit domain
// when it fits ("00000000:1B:00.0" → "0000:1b:00.0"). Ids that do not look
// like bus ids come back lower-cased.
func NormBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(strings.TrimRight(s, "\x00")))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil || d > 0xffff {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

func (s sysfs) read(rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.root, rel))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// devicePath resolves a link such as "class/net/eth0/device" or
// "bus/pci/devices/0000:18:00.0" to its place under devices/, as a list of
// path components after "devices" (["pci0000:00", "0000:00:01.0", ...]).
func (s sysfs) devicePath(rel string) ([]string, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(s.root, rel))
	if err != nil {
		return nil, err
	}
	root, err := filepath.EvalSymlinks(s.root)
	if err != nil {
		return nil, err
	}
	r, err := filepath.Rel(root, real)
	if err != nil || !strings.HasPrefix(r, "devices"+string(filepath.Separator)) {
		return nil, fmt.Errorf("%s resolves to %s, outside %s/devices", rel, real, s.root)
	}
	return strings.Split(r, string(filepath.Separator))[1:], nil
}

// pciPos turns a device path (from devicePath) into the PCI function's bus
// id and its PCIPos. The function is the last bus-id component (a net
// device's path continues past it: .../0000:05:00.0/net/eth0). Switches are
// found as NCCL does: walking up from the function two levels at a time
// (downstream port, then the switch's upstream port) until the root
// complex.
func pciPos(comps []string) (busID string, pos PCIPos, ok bool) {
	last := -1
	for i, c := range comps {
		if bdfRE.MatchString(c) {
			last = i
		}
	}
	if last < 0 || !strings.HasPrefix(comps[0], "pci") {
		return "", PCIPos{}, false
	}
	for i := 1; i <= last; i++ {
		if !bdfRE.MatchString(comps[i]) {
			return "", PCIPos{}, false
		}
	}
	pos.Root = comps[0]
	bridges := comps[1:last] // between the root complex and the function
	for i := len(bridges) - 2; i >= 0; i -= 2 {
		pos.Switches = append([]string{NormBusID(bridges[i])}, pos.Switches...)
	}
	return NormBusID(comps[last]), pos, true
}

// pciDevice reads what sysfs says about a PCI function: its position,
// NUMA node and PCIe link. Problems go to unknown.
func (s sysfs) pciDevice(busID string, numaNodes int) (pos PCIPos, numa int, link PCIeLink, cpus string, unknown []string) {
	dir := filepath.Join("bus/pci/devices", busID)
	numa = -1
	comps, err := s.devicePath(dir)
	if err != nil {
		return pos, numa, link, "", []string{"pci position: " + err.Error()}
	}
	if _, p, ok := pciPos(comps); ok {
		pos = p
	} else {
		unknown = append(unknown, "pci position: cannot parse "+strings.Join(comps, "/"))
	}
	numa, why := s.numaOf(dir, numaNodes)
	if why != "" {
		unknown = append(unknown, why)
	}
	link = s.pcieLink(dir)
	cpus, _ = s.read(filepath.Join(dir, "local_cpulist"))
	return pos, numa, link, cpus, unknown
}

// numaOf reads dir/numa_node. The kernel says -1 when firmware gave no
// node; on a host with a single NUMA node that can only be node 0.
func (s sysfs) numaOf(dir string, numaNodes int) (int, string) {
	v, err := s.read(filepath.Join(dir, "numa_node"))
	if err != nil {
		return -1, "numa node: " + err.Error()
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		return -1, fmt.Sprintf("numa node: %q is not a number", v)
	case n >= 0:
		return n, ""
	case numaNodes == 1:
		return 0, ""
	}
	return -1, "numa node: firmware gives none (-1)"
}

// pcieLink reads {current,max}_link_{speed,width}; values it cannot read
// stay 0.
func (s sysfs) pcieLink(dir string) PCIeLink {
	gen := func(f string) int {
		v, err := s.read(filepath.Join(dir, f)) // "32.0 GT/s PCIe"
		if err != nil {
			return 0
		}
		x, err := strconv.ParseFloat(strings.Fields(v + " x")[0], 64)
		if err != nil {
			return 0
		}
		return PCIeGenFromRate(x)
	}
	width := func(f string) int {
		v, err := s.read(filepath.Join(dir, f))
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(v)
		return max(n, 0)
	}
	return PCIeLink{Gen: gen("current_link_speed"), Width: width("current_link_width"),
		MaxGen: gen("max_link_speed"), MaxWidth: width("max_link_width")}
}

// numa lists the host's NUMA nodes.
func (s sysfs) numa() ([]NUMANode, error) {
	ents, err := os.ReadDir(filepath.Join(s.root, "devices/system/node"))
	if err != nil {
		return nil, err
	}
	var out []NUMANode
	for _, e := range ents {
		id, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if !strings.HasPrefix(e.Name(), "node") || err != nil {
			continue
		}
		cpus, _ := s.read(filepath.Join("devices/system/node", e.Name(), "cpulist"))
		out = append(out, NUMANode{ID: id, CPUs: cpus})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// pciClass reads a PCI function's class ("0x068000"), or "".
func (s sysfs) pciClass(busID string) string {
	v, _ := s.read(filepath.Join("bus/pci/devices", busID, "class"))
	return strings.ToLower(v)
}
