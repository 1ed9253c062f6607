package testenv

import (
	"net"
	"testing"
)

// SecondNIC returns the first up interface with an IPv4 address besides
// loopback (eth0 in the usual container): with lo, two subnets, so two
// rails for the tests that need them. It skips through Missing without one.
func SecondNIC(t testing.TB) string {
	t.Helper()
	ifs, _ := net.Interfaces()
	for _, f := range ifs {
		if f.Flags&net.FlagUp == 0 || f.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := f.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				return f.Name
			}
		}
	}
	Missing(t, "network interface", "the test needs one up interface with an IPv4 address besides loopback (two subnets: two rails)")
	return ""
}
