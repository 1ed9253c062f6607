// Package transports is the registry of host link transports: it opens the
// endpoints a communicator may use (shared memory, the network transport
// with one endpoint per NIC, the host TCP link: the network transport's
// tcp provider on one interface) and picks the link
// kinds between two ranks, so the communicator core never names a
// transport package. Kinds are strings: "shm", "tcp", and "net0", "net1",
// ... for the network transport's rails (NIC i of the provider is rail i).
package transports

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/netlink"
	"github.com/flexlink/flexlink/fabric/shm"
)

// Modes of FLEXLINK_TRANSPORT.
const (
	ModeAuto = "auto" // shm within a host, the network transport across hosts
	ModeShm  = "shm"  // shm only (one host)
	ModeNet  = "net"  // the network transport for every pair
	ModeTCP  = "tcp"  // the host TCP link (netlink over a tcp provider) for every pair
)

// CheckMode validates a FLEXLINK_TRANSPORT value.
func CheckMode(mode string) error {
	switch mode {
	case ModeAuto, ModeShm, ModeNet, ModeTCP:
		return nil
	}
	return fmt.Errorf("FLEXLINK_TRANSPORT=%q: want auto, shm, net or tcp", mode)
}

// RailKind is the link kind of the network transport's rail i.
func RailKind(i int) string { return string(fabric.KindNet) + strconv.Itoa(i) }

// Open opens the endpoints mode allows for one communicator: shm (auto,
// shm), one network endpoint per device of p listed in devs (auto, net;
// SelectDevices), tcp (tcp, or auto when links, FLEXLINK_LINKS, names
// it). On error nothing stays open.
func Open(mode, links string, cfg fabric.EndpointConfig, p net.Provider, devs []int) (map[string]fabric.Endpoint, error) {
	if err := CheckMode(mode); err != nil {
		return nil, err
	}
	eps := map[string]fabric.Endpoint{}
	fail := func(what string, err error) (map[string]fabric.Endpoint, error) {
		Close(eps)
		return nil, fmt.Errorf("rank %d on %s: open %s endpoint: %w", cfg.Rank, cfg.Host, what, err)
	}
	if mode == ModeAuto || mode == ModeShm {
		ep, err := shm.NewEndpoint(cfg)
		if err != nil {
			return fail("shm", err)
		}
		eps[string(fabric.KindShm)] = ep
	}
	if mode == ModeTCP || mode == ModeAuto && namesKind(links, string(fabric.KindTCP)) {
		ep, err := netlink.NewTCPEndpoint(cfg)
		if err != nil {
			return fail("tcp", err)
		}
		eps[string(fabric.KindTCP)] = ep
	}
	if (mode == ModeAuto || mode == ModeNet) && p != nil {
		if err := OpenRails(eps, cfg, p, devs); err != nil {
			Close(eps)
			return nil, err
		}
	}
	return eps, nil
}

// OpenRails adds one network endpoint per device index of devs to eps
// (kind RailKind(i) for device i). On error the endpoints it added are
// closed.
func OpenRails(eps map[string]fabric.Endpoint, cfg fabric.EndpointConfig, p net.Provider, devs []int) error {
	for n, i := range devs {
		ep, err := netlink.Open(p, i, netlink.Config{Rank: cfg.Rank, Host: cfg.Host, Secret: cfg.Secret, JobID: cfg.JobID, Comm: cfg.Comm, Logger: cfg.Log().Named("net")})
		if err != nil {
			for _, j := range devs[:n] {
				eps[RailKind(j)].Close()
				delete(eps, RailKind(j))
			}
			return fmt.Errorf("rank %d on %s: open %s endpoint (%s): %w", cfg.Rank, cfg.Host, RailKind(i), p.Devices()[i].Name, err)
		}
		eps[RailKind(i)] = ep
	}
	return nil
}

// Close closes every endpoint of eps (links already made stay).
func Close(eps map[string]fabric.Endpoint) {
	for _, ep := range eps {
		ep.Close()
	}
}

// Pair says what two ranks know of each other when they pick link kinds.
type Pair struct {
	Mode      string // FLEXLINK_TRANSPORT
	SameHost  bool
	Links     string // FLEXLINK_LINKS (comma list of kinds; "" none named)
	MyRails   int    // network endpoints this rank opened
	PeerRails int    // network endpoints the peer opened
	// RailPairs, when not nil, are the rail links (PairRails) and replace
	// pairing rails 0..min(MyRails, PeerRails)-1 by index.
	RailPairs []string
}

// Kinds picks the link kinds between this rank and a peer, the same list on
// both sides: shm on one host (auto, shm), every rail both ranks have across
// hosts (auto) or for every pair (net), tcp (tcp). More than one kind makes
// a multi-link channel whose shares the balancer learns. In auto mode
// FLEXLINK_LINKS naming several host kinds (shm,tcp / shm,net) asks for all
// of them that reach the peer.
func Kinds(p Pair) ([]string, error) {
	if err := CheckMode(p.Mode); err != nil {
		return nil, err
	}
	rails := func() ([]string, error) {
		if len(p.RailPairs) > 0 {
			return p.RailPairs, nil
		}
		n := min(p.MyRails, p.PeerRails)
		if n == 0 {
			return nil, fmt.Errorf("no network transport rail in common (this rank has %d, the peer %d): set FLEXLINK_NET_IFNAME or FLEXLINK_TRANSPORT", p.MyRails, p.PeerRails)
		}
		out := make([]string, n)
		for i := range out {
			out[i] = RailKind(i)
		}
		return out, nil
	}
	switch p.Mode {
	case ModeShm:
		if !p.SameHost {
			return nil, fmt.Errorf("FLEXLINK_TRANSPORT=shm but the peer is on another host")
		}
		return []string{string(fabric.KindShm)}, nil
	case ModeTCP:
		return []string{string(fabric.KindTCP)}, nil
	case ModeNet:
		return rails()
	}
	var kinds []string
	for _, k := range strings.Split(p.Links, ",") {
		switch k = strings.TrimSpace(k); k {
		case string(fabric.KindShm):
			if p.SameHost {
				kinds = append(kinds, k)
			}
		case string(fabric.KindTCP):
			kinds = append(kinds, k)
		case string(fabric.KindNet):
			if p.SameHost && min(p.MyRails, p.PeerRails) == 0 && len(p.RailPairs) == 0 {
				continue // no network endpoint within a host in auto mode (FLEXLINK_LINKS=nvlink,net names GPU links)
			}
			r, err := rails()
			if err != nil {
				return nil, err
			}
			kinds = append(kinds, r...)
		}
	}
	if len(kinds) == 0 && p.SameHost {
		return []string{string(fabric.KindShm)}, nil
	}
	if len(kinds) == 0 {
		return rails()
	}
	slices.Sort(kinds) // both sides must list the links in the same order
	return slices.Compact(kinds), nil
}

// namesKind reports whether the comma list links names kind.
func namesKind(links, kind string) bool {
	for _, k := range strings.Split(links, ",") {
		if strings.TrimSpace(k) == kind {
			return true
		}
	}
	return false
}
