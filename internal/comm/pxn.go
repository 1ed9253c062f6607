package comm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/flog"
	"github.com/flexlink/flexlink/proxy"
	"github.com/flexlink/flexlink/proxy/pxn"
)

// pxnState is a communicator's PXN proxy, made on the first all-to-all
// that crosses hosts with FLEXLINK_PXN set (0, 1 or 2).
type pxnState struct {
	mu    sync.Mutex
	px    *proxy.Proxy
	plan  *pxn.Plan
	err   error // why PXN is not used (logged once), or nil
	tried bool
	// handoff is the hidden communicator of this host's members whose
	// links carry the group service's hand-offs (pxngroup.go), or nil.
	handoff *Comm
}

// localLinks adapts the link set to proxy.Local.
type localLinks struct{ s *linkSet }

func (l localLinks) Send(p int, tag fabric.Tag, b []byte) fabric.Request {
	return l.s.post(p, true, tag, collectives.HostBuffer(b))
}
func (l localLinks) Recv(p int, tag fabric.Tag, b []byte) fabric.Request {
	return l.s.post(p, false, tag, collectives.HostBuffer(b))
}

// pxnProxy returns c's proxy, or nil when PXN is off or
// cannot apply: FLEXLINK_PXN off, all members on one host, no network
// transport, or NICs whose subnets (rails) are unknown.
func pxnProxy(ctx context.Context, c *Comm) (*proxy.Proxy, error) {
	st := &c.pxn
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.tried {
		return st.px, nil
	}
	st.tried = true
	w := c.world
	if w.net.cfg.PXN < 0 || !w.needsNet(c.members) || w.mode != "auto" {
		return nil, nil
	}
	plan, err := pxnPlan(c)
	if err != nil {
		st.err = err
		w.log.Info("PXN not used: all-to-all takes the communicator's links", "comm", c.name, "why", err)
		return nil, nil
	}
	p, devs, err := w.provider()
	if err != nil {
		return nil, err
	}
	px, err := proxy.New(ctx, proxy.Config{
		Rank: c.rank, Hosts: hostsOf(c), Via: func(s, d int) int { r, _ := plan.Route(s, d); return r.Via },
		Local: localLinks{c.links}, Provider: p, Dev: devs[0], Dir: w.store, Key: "pxn/" + c.name + "/",
		Auth: proxy.Auth{Secret: w.secret, JobID: w.jobID, Log: w.log},
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s: PXN proxy: %w", w.store.Rank(), w.host, err)
	}
	st.px, st.plan = px, plan
	go func() { // the job's end (a rank lost, an abort) fails everything the proxy holds
		select {
		case <-w.store.Done():
			px.Abort(w.store.Err())
		case <-c.links.ctx.Done():
			px.Abort(context.Cause(c.links.ctx))
		}
	}()
	return px, nil
}

func hostsOf(c *Comm) []string {
	out := make([]string, c.size)
	for i := range out {
		out[i] = c.PeerHost(i)
	}
	return out
}

// pxnPlan plans c's PXN routes over railWorld.
func pxnPlan(c *Comm) (*pxn.Plan, error) {
	tw, err := railWorld(c)
	if err != nil {
		return nil, err
	}
	return pxn.Compute(tw, pxn.Options{Level: pxn.Level(c.world.net.cfg.PXN), Mem: pxn.HostMem})
}

// channelRings are the rings of c's ring collectives
// (collectives.Config.Rings): pxn.Rings over railWorld when every member
// sends from one NIC of a known subnet (FLEXLINK_PXN's own NIC, or
// FLEXLINK_NET_DEVICES naming one) and the members span hosts and rails;
// nil (one ring in rank order) otherwise, or with FLEXLINK_RINGS=1. Every
// member computes the same rings from the same published rails.
func channelRings(c *Comm) [][]int {
	w := c.world
	if w.net.rails == nil || !w.needsNet(c.members) || w.env.String("FLEXLINK_RINGS") == "1" {
		return nil
	}
	for _, m := range c.members {
		if len(w.net.rails[m]) != 1 {
			return nil // several NICs each: the multi-link stripes every pair over them
		}
	}
	tw, err := railWorld(c)
	if err != nil {
		return nil
	}
	if rings := pxn.Rings(tw); len(rings) > 1 {
		return rings
	}
	return nil
}

// ringsText writes rings for the log: ranks joined by commas, rings by
// slashes ("1,0,2,3/0,1,3,2").
func ringsText(rings [][]int) string {
	parts := make([]string, len(rings))
	for i, ring := range rings {
		parts[i] = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ring)), ","), "[]")
	}
	return strings.Join(parts, "/")
}

// railWorld builds the topology PXN needs from what the ranks published:
// every host's NICs are its ranks' first own NICs (the FLEXLINK_PXN
// selection, SelectDevices), each listed once and owned by the ranks that
// opened it (two ranks whose GPUs share a NIC both own it), each on the rail of its subnet
// (rails numbered in the order of the sorted subnets of the job); the
// ranks have no GPUs (host buffers).
func railWorld(c *Comm) (*topo.World, error) {
	w := c.world
	if w.net.rails == nil {
		return nil, fmt.Errorf("no rank published its NICs")
	}
	var subnets []string
	for _, m := range c.members {
		rs := w.net.rails[m]
		if len(rs) == 0 || rs[0].Subnet == "" {
			return nil, fmt.Errorf("rank %d's NIC has no known IPv4 subnet (rail)", m)
		}
		subnets = append(subnets, rs[0].Subnet)
	}
	slices.Sort(subnets)
	subnets = slices.Compact(subnets)
	hosts := map[string]*topo.Host{}
	members := make([]topo.Member, c.size)
	for i, m := range c.members {
		name := w.hosts[m]
		h := hosts[name]
		if h == nil {
			h = &topo.Host{Hostname: name, GPUs: []topo.GPU{}, NoGPU: "pxn: host buffers"}
			hosts[name] = h
		}
		r := w.net.rails[m][0]
		nic := slices.IndexFunc(h.NICs, func(n topo.NIC) bool { return n.Name == r.Name })
		if nic < 0 {
			nic = len(h.NICs)
			h.NICs = append(h.NICs, topo.NIC{Name: r.Name, Netdev: r.Name, NUMANode: -1, Rail: slices.Index(subnets, r.Subnet)})
		}
		members[i] = topo.Member{Host: h, GPU: -1, NICs: []int{nic}}
	}
	return topo.NewWorld(members)
}

// PXNUsed reports whether c's all-to-alls go through the PXN proxy (see
// pxnProxy), setting the proxy up on first use: a caller that must prepare
// its buffers for the proxy (an in-place call's copy of send) asks first.
func (c *Comm) PXNUsed(ctx context.Context) (bool, error) {
	px, err := pxnProxy(ctx, c)
	return px != nil, err
}

// PXNAllToAllv runs an all-to-all of byte blocks through the PXN proxy
// when FLEXLINK_PXN applies (ok true), following the planner's routes;
// send[d] goes to rank d, recv[s] takes rank s's block (its exact length).
// ok false: PXN does not apply and the caller takes the usual path. Call
// it inside Run.
func (c *Comm) PXNAllToAllv(ctx context.Context, send, recv [][]byte) (ok bool, err error) {
	px, err := pxnProxy(ctx, c)
	if px == nil || err != nil {
		return err != nil, err
	}
	st, err := px.AllToAllv(ctx, send, recv)
	logPXN(c, st)
	return true, err
}

// logPXN prints a call's counters (INFO).
func logPXN(c *Comm, st proxy.Stats) {
	per := 0.0
	if st.Receives > 0 {
		per = float64(st.Buffers) / float64(st.Receives)
	}
	flog.Sub(c.world.log, flog.Net).Info("pxn all-to-all", "comm", c.name, "nic", st.NIC, "bytes", st.Bytes, "messages", st.Messages,
		"relayed", st.Relayed, "gathered", st.Gathered, "received", st.Received, "receives", st.Receives, "buffers_per_receive", fmt.Sprintf("%.2f", per))
}

// PXNHandoff returns the PXN route's relay for every pair when the GPU
// hand-off applies to c: FLEXLINK_PXN_GPU_HANDOFF on and PXN used (see
// pxnProxy). via(s, d) is the rank of s's host that sends s's message for
// d (s itself: no relay); only asked for pairs on different hosts.
func (c *Comm) PXNHandoff(ctx context.Context) (via func(s, d int) int, ok bool, err error) {
	if !c.world.env.Bool("FLEXLINK_PXN_GPU_HANDOFF") {
		return nil, false, nil
	}
	px, err := pxnProxy(ctx, c)
	if px == nil || err != nil {
		return nil, false, err
	}
	plan := c.pxn.plan
	return func(s, d int) int { r, _ := plan.Route(s, d); return r.Via }, true, nil
}

// PXNAllToAllvGathered is PXNAllToAllv for the GPU hand-off: the relays'
// messages are already on them (gathered; proxy.AllToAllvGathered).
func (c *Comm) PXNAllToAllvGathered(ctx context.Context, send, recv [][]byte, gathered map[[2]int][]byte) (ok bool, err error) {
	px, err := pxnProxy(ctx, c)
	if px == nil || err != nil {
		return err != nil, err
	}
	st, err := px.AllToAllvGathered(ctx, send, recv, gathered)
	logPXN(c, st)
	return true, err
}

// PXNStats returns the PXN proxy's counters over every call, and false
// when the communicator has no proxy.
func (c *Comm) PXNStats() (proxy.Stats, bool) {
	c.pxn.mu.Lock()
	defer c.pxn.mu.Unlock()
	if c.pxn.px == nil {
		return proxy.Stats{}, false
	}
	return c.pxn.px.Totals(), true
}

// closePXN releases the proxy.
func closePXN(c *Comm) {
	c.pxn.mu.Lock()
	defer c.pxn.mu.Unlock()
	if c.pxn.px != nil {
		c.pxn.px.Close()
	}
	closePXNGroup(c.pxn.handoff)
}
