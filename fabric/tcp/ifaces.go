package tcp

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// iface is what interface selection needs to know of a network interface.
type iface struct {
	name     string
	up       bool
	loopback bool
	addrs    []net.IP
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
				f.addrs = append(f.addrs, ipn.IP)
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// usableAddr picks the interface's address to listen on: the first IPv4
// one, else the first IPv6 one that needs no zone.
func usableAddr(f iface) net.IP {
	for _, ip := range f.addrs {
		if ip.To4() != nil {
			return ip
		}
	}
	for _, ip := range f.addrs {
		if !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast() {
			return ip
		}
	}
	return nil
}

// chooseIface applies FLEXLINK_SOCKET_IFNAME (NCCL_SOCKET_IFNAME rules): a
// comma-separated list of name prefixes; a leading '^' selects the
// interfaces that match none of them; a leading '=' (after any '^') makes
// the names exact. Among the up interfaces with a usable address that
// pass, the first non-loopback one wins, else the first loopback one. An
// empty spec lets every interface pass.
func chooseIface(spec string, ifs []iface) (iface, net.IP, error) {
	s := strings.TrimSpace(spec)
	exclude := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	exact := strings.HasPrefix(s, "=")
	s = strings.TrimPrefix(s, "=")
	var names []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	matches := func(name string) bool {
		for _, n := range names {
			if exact && name == n || !exact && strings.HasPrefix(name, n) {
				return true
			}
		}
		return false
	}
	var loop *iface
	var have []string
	for i := range ifs {
		f := ifs[i]
		if !f.up || usableAddr(f) == nil {
			continue
		}
		have = append(have, f.name)
		if len(names) > 0 && matches(f.name) == exclude {
			continue
		}
		if !f.loopback {
			return f, usableAddr(f), nil
		}
		if loop == nil {
			loop = &ifs[i]
		}
	}
	if loop != nil {
		return *loop, usableAddr(*loop), nil
	}
	return iface{}, nil, fmt.Errorf("FLEXLINK_SOCKET_IFNAME=%q matches no up interface with an address (up: %s)",
		spec, strings.Join(have, ", "))
}

// linkSpeed estimates an interface's bandwidth in bytes per second from
// sysfs (0 when unknown, as for loopback).
func linkSpeed(name string) float64 {
	b, err := os.ReadFile("/sys/class/net/" + name + "/speed")
	if err != nil {
		return 0
	}
	mbps, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || mbps <= 0 {
		return 0
	}
	return float64(mbps) * 125e3
}
