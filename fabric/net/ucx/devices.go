package ucx

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	fnet "github.com/flexlink/flexlink/fabric/net"
)

// device is one network interface as this provider sees it: the address
// its side channel listens on, and the Device it reports.
type device struct {
	fnet.Device
	ip netip.Addr
}

// listDevices returns the interfaces that are up and have an address,
// non-loopback first (each by name), loopback last. When UCX_NET_DEVICES
// names interfaces (not "all"), only those are listed, so the side channel
// uses the devices UCX itself was told to use; entries such as "mlx5_0:1"
// (verbs ports, which have no IP address of their own) leave the list
// unfiltered when none of the names is an interface.
func listDevices(netDevices string) []device {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []device
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		ip, ok := firstAddr(ifc)
		if !ok {
			continue
		}
		d := device{ip: ip}
		d.Name = ifc.Name
		d.PCIPath = pciPath(ifc.Name)
		d.Speed = speed(ifc.Name)
		d.Ptr = fnet.MemHost
		d.MaxRecvs = fnet.MaxRecvs
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool {
		li, lj := out[i].ip.IsLoopback(), out[j].ip.IsLoopback()
		if li != lj {
			return !li
		}
		return out[i].Name < out[j].Name
	})
	if want := wanted(netDevices); len(want) > 0 {
		var kept []device
		for _, d := range out {
			if want[d.Name] {
				kept = append(kept, d)
			}
		}
		if len(kept) > 0 {
			out = kept
		}
	}
	return out
}

// wanted parses UCX_NET_DEVICES ("eth0,mlx5_0:1"; "all" or "" means all).
func wanted(v string) map[string]bool {
	v = strings.TrimSpace(v)
	if v == "" || v == "all" {
		return nil
	}
	m := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		m[strings.TrimSpace(f)] = true
	}
	return m
}

// firstAddr prefers an IPv4 address, then a global IPv6 one.
func firstAddr(ifc net.Interface) (netip.Addr, bool) {
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, false
	}
	var v6 netip.Addr
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := p.Addr()
		if ip.Is4() {
			return ip, true
		}
		if !v6.IsValid() && !ip.IsLinkLocalUnicast() {
			v6 = ip
		}
	}
	return v6, v6.IsValid()
}

func pciPath(name string) string {
	p, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", name, "device"))
	if err != nil || !strings.Contains(p, "/pci") {
		return ""
	}
	return p
}

// speed reads the link speed (Mbit/s in sysfs) as bytes per second.
func speed(name string) float64 {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "speed"))
	if err != nil {
		return 0
	}
	mbit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || mbit <= 0 {
		return 0
	}
	return float64(mbit) * 1e6 / 8
}
