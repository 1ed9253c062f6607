package tcp

import (
	"net"
	"strings"
	"testing"

	"flexlink/fabric"
	"flexlink/internal/settings"
)

func TestChooseIface(t *testing.T) {
	ip := net.ParseIP
	ifs := []iface{
		{name: "lo", up: true, loopback: true, addrs: []net.IP{ip("127.0.0.1")}},
		{name: "docker0", up: true, addrs: []net.IP{ip("172.17.0.1")}},
		{name: "eth0", up: true, addrs: []net.IP{ip("fe80::1"), ip("10.0.0.5")}},
		{name: "eth1", up: false, addrs: []net.IP{ip("10.0.1.5")}},
		{name: "eth10", up: true, addrs: []net.IP{ip("fe80::2"), ip("2001:db8::7")}},
		{name: "ib0", up: true, addrs: nil},
	}
	for _, tc := range []struct {
		spec, name, addr string // name "": an error is expected
	}{
		{"", "docker0", "172.17.0.1"},
		{"eth", "eth0", "10.0.0.5"},
		{"=eth1", "", ""},                  // down
		{"=eth10", "eth10", "2001:db8::7"}, // no IPv4: the global IPv6 address
		{"=eth", "", ""},                   // exact: no interface is called eth
		{"^docker", "eth0", "10.0.0.5"},
		{"^docker,eth0", "eth10", "2001:db8::7"},
		{"^=docker0,eth0,eth10", "lo", "127.0.0.1"}, // only loopback left
		{"^=eth0", "docker0", "172.17.0.1"},
		{"lo", "lo", "127.0.0.1"},
		{" eth0 , lo ", "eth0", "10.0.0.5"},
		{"ib", "", ""}, // no address
		{"wlan", "", ""},
	} {
		f, addr, err := chooseIface(tc.spec, ifs)
		switch {
		case tc.name == "" && err == nil:
			t.Errorf("spec %q chose %s %s, want an error", tc.spec, f.name, addr)
		case tc.name != "" && err != nil:
			t.Errorf("spec %q: %v", tc.spec, err)
		case tc.name != "" && (f.name != tc.name || !addr.Equal(ip(tc.addr))):
			t.Errorf("spec %q chose %s %s, want %s %s", tc.spec, f.name, addr, tc.name, tc.addr)
		}
	}
	if _, _, err := chooseIface("wlan", ifs); err == nil || !strings.Contains(err.Error(), "lo, docker0, eth0, eth10") {
		t.Errorf("error %v should list the usable interfaces", err)
	}
}

func TestStripes(t *testing.T) {
	for _, k := range []int{1, 2, 3, 4, 16} {
		for _, n := range []uint64{0, 1, stripeMin - 1, stripeMin, stripeMin + 1, 1 << 20, 64<<20 + 3, 5 * stripeAlign} {
			parts := stripes(n, k)
			if len(parts) != k {
				t.Fatalf("stripes(%d, %d) has %d parts", n, k, len(parts))
			}
			sum, zero := uint64(0), false
			for i, p := range parts {
				sum += p
				if p == 0 && i > 0 {
					zero = true
				} else if zero {
					t.Errorf("stripes(%d, %d) = %v: a part after an empty one", n, k, parts)
				}
				if i < k-1 && parts[i+1] > 0 && p%stripeAlign != 0 {
					t.Errorf("stripes(%d, %d) = %v: part %d ends off a %d-byte boundary", n, k, parts, i, stripeAlign)
				}
			}
			if sum != n {
				t.Errorf("stripes(%d, %d) = %v sums to %d", n, k, parts, sum)
			}
			if (n < stripeMin || k == 1) && parts[0] != n {
				t.Errorf("stripes(%d, %d) = %v: a small message must travel whole on socket 0", n, k, parts)
			}
			if n >= stripeMin && k > 1 && parts[1] == 0 {
				t.Errorf("stripes(%d, %d) = %v: a large message must use several sockets", n, k, parts)
			}
		}
	}
}

func TestBadSettings(t *testing.T) {
	for _, env := range []map[string]string{
		{"FLEXLINK_SOCKETS_PER_PEER": "0"},
		{"FLEXLINK_SOCKETS_PER_PEER": "17"},
		{"FLEXLINK_SOCKETS_PER_PEER": "two"},
		{"FLEXLINK_SOCKET_TIMEOUT": "-1s"},
		{"FLEXLINK_SOCKET_IFNAME": "=no-such-interface"},
	} {
		m := map[string]string{}
		for k, v := range env {
			m[k] = v
		}
		cfg := fabric.EndpointConfig{Rank: 0, Size: 2, Secret: []byte("s"), Env: settings.Map(m)}
		if e, err := NewEndpoint(cfg); err == nil {
			e.Close()
			t.Errorf("NewEndpoint with %v succeeded", env)
		}
	}
}
