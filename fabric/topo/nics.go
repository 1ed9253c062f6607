package topo

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// nics lists the host's NICs from class/infiniband (RDMA devices, one NIC
// per port) and class/net (net devices backed by a device; virtual ones
// such as lo, bridges and veths are left out). A net device on the same PCI
// function as an RDMA device is that NIC's Netdev, not a NIC of its own.
func (s sysfs) nics(numaNodes int) ([]NIC, []string) {
	var out, ib []NIC
	var unknown []string
	ibDevs, err := os.ReadDir(filepath.Join(s.root, "class/infiniband"))
	if err != nil && !os.IsNotExist(err) {
		unknown = append(unknown, "rdma devices: "+err.Error())
	}
	for _, d := range ibDevs {
		ib = append(ib, s.rdmaNICs(d.Name(), numaNodes)...)
	}
	netDevs, err := os.ReadDir(filepath.Join(s.root, "class/net"))
	if err != nil {
		unknown = append(unknown, "net devices: "+err.Error())
	}
	byBus := map[string]int{}
	for i, n := range ib {
		if n.BusID != "" {
			if _, dup := byBus[n.BusID]; !dup {
				byBus[n.BusID] = i
			}
		}
	}
	for _, d := range netDevs {
		name := d.Name()
		dev := filepath.Join("class/net", name, "device")
		if _, err := os.Lstat(filepath.Join(s.root, dev)); err != nil {
			continue // virtual: no device behind it
		}
		n := s.deviceNIC(dev, numaNodes)
		if i, ok := byBus[n.BusID]; ok && n.BusID != "" {
			if ib[i].Netdev == "" {
				ib[i].Netdev = name
			}
			continue
		}
		n.Name, n.Netdev = name, name
		if v, err := s.read(filepath.Join("class/net", name, "speed")); err == nil {
			if mbs, err := strconv.ParseFloat(v, 64); err == nil && mbs > 0 {
				n.Speed = mbs * 1e6
			}
		}
		if n.Speed == 0 {
			n.Unknown = append(n.Unknown, "speed: not reported (link down, or a virtual NIC)")
		}
		out = append(out, n)
	}
	out = append(ib, out...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].BusID != out[j].BusID {
			return out[i].BusID < out[j].BusID
		}
		return out[i].Name < out[j].Name
	})
	return out, unknown
}

// deviceNIC fills a NIC's PCI facts from a "device" link.
func (s sysfs) deviceNIC(dev string, numaNodes int) NIC {
	n := NIC{NUMANode: -1, Rail: -1}
	comps, err := s.devicePath(dev)
	if err != nil {
		n.Unknown = append(n.Unknown, "pci position: "+err.Error())
		return n
	}
	bus, pos, ok := pciPos(comps)
	if !ok {
		n.Unknown = append(n.Unknown, "pci position: not a PCI device ("+strings.Join(comps, "/")+")")
		return n
	}
	n.BusID, n.PCI = bus, pos
	var why string
	n.NUMANode, why = s.numaOf(filepath.Join("bus/pci/devices", bus), numaNodes)
	if why != "" {
		n.Unknown = append(n.Unknown, why)
	}
	return n
}

// rdmaNICs reads one RDMA device: one NIC per port.
func (s sysfs) rdmaNICs(dev string, numaNodes int) []NIC {
	base := s.deviceNIC(filepath.Join("class/infiniband", dev, "device"), numaNodes)
	base.RDMA = true
	ports, _ := os.ReadDir(filepath.Join(s.root, "class/infiniband", dev, "ports"))
	if len(ports) == 0 {
		n := base
		n.Name = dev
		n.Unknown = append(n.Unknown, "ports: none listed")
		return []NIC{n}
	}
	var out []NIC
	for _, p := range ports {
		port, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		n := base
		n.Unknown = append([]string(nil), base.Unknown...)
		n.Name, n.Port = dev, port
		if len(ports) > 1 {
			n.Name = dev + ":" + p.Name()
		}
		dir := filepath.Join("class/infiniband", dev, "ports", p.Name())
		n.LinkLayer, _ = s.read(filepath.Join(dir, "link_layer"))
		rate, err := s.read(filepath.Join(dir, "rate")) // "400 Gb/sec (4X NDR)"
		if gbs, perr := strconv.ParseFloat(strings.Fields(rate + " x")[0], 64); err == nil && perr == nil && gbs > 0 {
			n.Speed = gbs * 1e9
		} else {
			n.Unknown = append(n.Unknown, "speed: port rate not readable")
		}
		out = append(out, n)
	}
	return out
}
