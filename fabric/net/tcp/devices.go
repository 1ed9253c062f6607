package tcp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// iface is what device selection needs to know of a network interface.
type iface struct {
	name     string
	up       bool
	loopback bool
	addrs    []netip.Addr
}

// systemIfaces lists this host's interfaces.
func systemIfaces() ([]iface, error) {
	list, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []iface
	for _, n := range list {
		addrs, err := n.Addrs()
		if err != nil {
			continue
		}
		f := iface{name: n.Name, up: n.Flags&net.FlagUp != 0, loopback: n.Flags&net.FlagLoopback != 0}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					f.addrs = append(f.addrs, ip.Unmap())
				}
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// ipv4 returns the interface's first IPv4 address.
func ipv4(f iface) (netip.Addr, bool) {
	for _, ip := range f.addrs {
		if ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// ifFilter is NCCL_SOCKET_IFNAME's syntax: a comma-separated list of name
// prefixes; a leading '^' selects the interfaces that match none of them;
// a leading '=' (after any '^') makes the names exact. Empty: everything.
type ifFilter struct {
	exclude, exact bool
	names          []string
}

func parseFilter(spec string) ifFilter {
	s := strings.TrimSpace(spec)
	var f ifFilter
	if f.exclude = strings.HasPrefix(s, "^"); f.exclude {
		s = s[1:]
	}
	if f.exact = strings.HasPrefix(s, "="); f.exact {
		s = s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			f.names = append(f.names, n)
		}
	}
	return f
}

// lists reports whether the filter names name (ignoring '^').
func (f ifFilter) lists(name string) bool {
	for _, n := range f.names {
		if f.exact && name == n || !f.exact && strings.HasPrefix(name, n) {
			return true
		}
	}
	return false
}

func (f ifFilter) pass(name string) bool {
	if len(f.names) == 0 {
		return true
	}
	return f.lists(name) != f.exclude
}

// chooseIfaces returns the up interfaces with an IPv4 address that pass
// spec, in the order given. Loopback interfaces are kept only when the
// filter names them explicitly (not through '^') or when nothing else
// passes.
func chooseIfaces(spec string, ifs []iface) ([]iface, error) {
	f := parseFilter(spec)
	var out, loops []iface
	var have []string
	for _, i := range ifs {
		if _, ok := ipv4(i); !i.up || !ok {
			continue
		}
		have = append(have, i.name)
		switch {
		case !f.pass(i.name):
		case !i.loopback:
			out = append(out, i)
		case !f.exclude && f.lists(i.name):
			out = append(out, i)
		default:
			loops = append(loops, i)
		}
	}
	if len(out) == 0 {
		out = loops
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("interface filter %q matches no up interface with an IPv4 address (up: %s)",
			spec, strings.Join(have, ", "))
	}
	return out, nil
}

// sysfs reads what /sys/class/net says of an interface: the PCI device's
// path ("" for virtual interfaces) and the speed in bytes per second (0
// when unknown, as for loopback and veth).
func sysfs(root, name string) (pci string, speed float64) {
	dir := filepath.Join(root, name)
	if p, err := filepath.EvalSymlinks(filepath.Join(dir, "device")); err == nil {
		pci = p
	}
	if b, err := os.ReadFile(filepath.Join(dir, "speed")); err == nil {
		if mbps, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && mbps > 0 {
			speed = float64(mbps) * 125e3
		}
	}
	return pci, speed
}
