package transports

import (
	"fmt"
	gonet "net"
	"strings"

	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
)

// Rail is one network endpoint a rank opened and publishes: the provider's
// device index, its name and the IPv4 subnet of its interface ("" when the
// device is not an IP interface, as UCX's "mlx5_0:1").
type Rail struct {
	Dev    int    `json:"dev"`
	Name   string `json:"name"`
	Subnet string `json:"subnet,omitempty"`
}

// Subnet returns the first IPv4 network of the interface named name, as
// "10.81.1.0/24", or "" when there is no such interface.
func Subnet(name string) string {
	ifi, err := gonet.InterfaceByName(name)
	if err != nil {
		return ""
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*gonet.IPNet); ok && n.IP.To4() != nil {
			return (&gonet.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}).String()
		}
	}
	return ""
}

// Own is what a rank knows of its place on its host, from which
// SelectDevices picks its own NICs (FLEXLINK_PXN 0-2).
type Own struct {
	LocalRank int        // index among the ranks of its host
	GPU       int        // the GPU it drives (GPU.Index, FLEXLINK_GPU); -1: none
	Host      *topo.Host // this host's topology (topo.Local); nil: unknown
}

// SelectDevices picks the devices of p this rank opens endpoints on:
//
//   - devices (FLEXLINK_NET_DEVICES, a comma list of device names): exactly
//     those, in the list's order; a name p does not have is an error;
//   - else, with own (PXN): the rank's own NICs as the topology planner
//     hands them out (topo.OwnNICs over the host's railed NICs that p
//     has: a GPU's nearest NICs, every GPU its own where there are as
//     many), its primary NIC first, when own.Host is known and names
//     them; otherwise the own.LocalRank-th device modulo their number;
//   - else every device.
func SelectDevices(devs []net.Device, devices string, own *Own) ([]int, error) {
	if len(devs) == 0 {
		return nil, nil
	}
	if strings.TrimSpace(devices) != "" {
		var out []int
		for _, name := range strings.Split(devices, ",") {
			name = strings.TrimSpace(name)
			i := deviceIndex(devs, name)
			if i < 0 {
				return nil, fmt.Errorf("FLEXLINK_NET_DEVICES=%q: no network device %q (have %s)", devices, name, deviceNames(devs))
			}
			out = append(out, i)
		}
		return out, nil
	}
	if own != nil {
		if out := plannedDevices(devs, *own); len(out) > 0 {
			return out, nil
		}
		return []int{own.LocalRank % len(devs)}, nil
	}
	out := make([]int, len(devs))
	for i := range out {
		out[i] = i
	}
	return out, nil
}

// OwnOf is what SelectDevices needs of this rank (nil without PXN,
// cfg.PXN < 0): its local rank, the GPU it drives (FLEXLINK_GPU; unset:
// none) and, when it drives one or FLEXLINK_TOPO_FILE is set, its host's
// topology (topo.Local; a rank without a GPU deals the host's NICs by
// local rank, as the provider lists them, unless a file says more). A
// topology that cannot be read leaves Host nil, with the error returned
// for the caller to log: the rank then falls back to its local rank.
func OwnOf(cfg NetConfig, env settings.Env, hostname string, localRank int) (*Own, error) {
	if cfg.PXN < 0 {
		return nil, nil
	}
	own := &Own{LocalRank: localRank, GPU: -1}
	if strings.TrimSpace(env.String("FLEXLINK_GPU")) != "" {
		g, err := env.Int("FLEXLINK_GPU")
		if err != nil {
			return own, err
		}
		own.GPU = g
	}
	if own.GPU < 0 && env.String("FLEXLINK_TOPO_FILE") == "" {
		return own, nil
	}
	h, err := topo.Local(env, topo.Options{Hostname: hostname})
	if err != nil {
		return own, fmt.Errorf("own NIC: host topology: %w", err)
	}
	own.Host = h
	return own, nil
}

// plannedDevices is own's NICs as topo.OwnNICs gives them, as indexes
// into devs; nil when the topology is unknown or names none of devs.
func plannedDevices(devs []net.Device, own Own) []int {
	h := own.Host
	if h == nil {
		return nil
	}
	devOf := map[int]int{} // NIC index -> device index
	var cands []int
	for _, n := range topo.RailNICs(h) {
		nic := h.NICs[n]
		for i, d := range devs {
			if d.Name == nic.Name || (nic.Netdev != "" && d.Name == nic.Netdev) {
				devOf[n] = i
				cands = append(cands, n)
				break
			}
		}
	}
	var out []int
	for _, n := range topo.OwnNICs(h, cands, own.GPU, own.LocalRank) {
		out = append(out, devOf[n])
	}
	return out
}

func deviceIndex(devs []net.Device, name string) int {
	for i, d := range devs {
		if d.Name == name {
			return i
		}
	}
	return -1
}

func deviceNames(devs []net.Device) string {
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	return strings.Join(names, ",")
}

// Rails describes the devices devs[sel] as the rails this rank publishes.
func Rails(devs []net.Device, sel []int) []Rail {
	out := make([]Rail, len(sel))
	for i, d := range sel {
		out[i] = Rail{Dev: d, Name: devs[d].Name, Subnet: Subnet(devs[d].Name)}
	}
	return out
}

// PairRails pairs the rails of two ranks, lo being the rails of the lower
// world rank, so both sides compute the same list. A rail of lo pairs with
// the first unpaired rail of hi in the same subnet (one rail per leaf
// switch). When both sides know their subnets and share none, the pair's
// first rails pair anyway (the traffic is routed across rails: the spine).
// When a side's subnets are unknown, rails pair by position. At most max
// pairs (0: all), and never more than a multi-link channel balances
// (balance.MaxLinks: on a machine with more NICs, say container bridges
// beside the rails, the first ones). The result is link kinds (see
// RailPairKind).
func PairRails(lo, hi []Rail, max int) []string {
	if max <= 0 || max > balance.MaxLinks {
		max = balance.MaxLinks
	}
	known := func(rs []Rail) bool {
		for _, r := range rs {
			if r.Subnet == "" {
				return false
			}
		}
		return len(rs) > 0
	}
	var out []string
	add := func(a, b Rail) bool {
		out = append(out, RailPairKind(a.Dev, b.Dev))
		return len(out) >= max
	}
	if !known(lo) || !known(hi) {
		for i := 0; i < min(len(lo), len(hi)); i++ {
			if add(lo[i], hi[i]) {
				break
			}
		}
		return out
	}
	used := make([]bool, len(hi))
	for _, a := range lo {
		for j, b := range hi {
			if !used[j] && a.Subnet == b.Subnet {
				used[j] = true
				if add(a, b) {
					return out
				}
				break
			}
		}
	}
	if len(out) == 0 {
		add(lo[0], hi[0])
	}
	return out
}

// RailPairKind is the link kind of the rail pair (the lower rank's device
// a, the higher rank's b): RailKind(a) when a == b, "net<a>:net<b>"
// otherwise.
func RailPairKind(a, b int) string {
	if a == b {
		return RailKind(a)
	}
	return RailKind(a) + ":" + RailKind(b)
}

// SplitKind returns the local endpoint kind and the peer's address kind of
// a link kind: for a rail pair "net<a>:net<b>" the lower rank's side is a,
// the other b; every other kind is both.
func SplitKind(kind string, lower bool) (local, remote string) {
	a, b, ok := strings.Cut(kind, ":")
	if !ok {
		return kind, kind
	}
	if lower {
		return a, b
	}
	return b, a
}
