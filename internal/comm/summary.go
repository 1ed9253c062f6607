package comm

import (
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/internal/flog"
)

// logSummary writes the communicator's INFO line at creation (subsystem
// INIT), the flexlink counterpart of NCCL's "Init COMPLETE" lines:
//
//	communicator: comm=w rank=0 nranks=8 nhosts=2 hosts=n1:4,n2:4 local_ranks=4 transports=net0,net1,shm same_host_peers=3 same_host_links=shm other_host_peers=4 other_host_links=net0+net1 balanced=other_host shares=learnt
//
// hosts lists each host with its number of the communicator's ranks, in
// the order of their first rank. *_links are the link kinds this rank
// will open to a peer of that kind (links open lazily, on the first
// message; a "+" joins the kinds of one balanced channel), computed as
// the link set computes them, assuming the peer has this rank's rails.
// The balancer's shares are not known yet at creation: with a balanced
// kind, "balancer shares" lines (NET) give them as they settle and "link
// shares" at close.
func logSummary(c *Comm) {
	lg := c.world.log
	if !flog.Enabled(lg, flog.Init, hclog.Info) {
		return
	}
	var order []string
	count := map[string]int{}
	same := 0
	for r := range c.size {
		h := c.PeerHost(r)
		if count[h] == 0 {
			order = append(order, h)
		}
		count[h]++
		if r != c.rank && h == c.world.host {
			same++
		}
	}
	hosts := make([]string, len(order))
	for i, h := range order {
		hosts[i] = h + ":" + strconv.Itoa(count[h])
	}
	kinds := make([]string, 0, len(c.eps))
	rails := 0
	for k := range c.eps {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for rails < 64 && c.eps[transports.RailKind(rails)] != nil {
		rails++
	}
	args := []any{"comm", c.name, "nranks", c.size, "nhosts", len(order), "hosts", strings.Join(hosts, ","),
		"local_ranks", same + 1, "transports", strings.Join(kinds, ",")}
	var balanced []string
	for _, g := range []struct {
		name  string
		peers int
		local bool
	}{{"same_host", same, true}, {"other_host", c.size - 1 - same, false}} {
		if g.peers == 0 {
			continue
		}
		links := "none"
		ks, err := transports.Kinds(transports.Pair{Mode: c.world.mode, SameHost: g.local, Links: c.world.links, MyRails: rails, PeerRails: rails})
		if err == nil {
			links = strings.Join(ks, "+")
		}
		if len(ks) > 1 {
			balanced = append(balanced, g.name)
		}
		args = append(args, g.name+"_peers", g.peers, g.name+"_links", links)
	}
	if len(balanced) > 0 {
		args = append(args, "balanced", strings.Join(balanced, ","), "shares", "learnt")
	}
	flog.Sub(lg, flog.Init).Info("communicator", args...)
}
