package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/flog"
	"github.com/flexlink/flexlink/proxy"
	"github.com/flexlink/flexlink/proxy/pxn"
)

// Grouped send/recv through the PXN proxy (FLEXLINK_PXN_GROUP=1 with
// FLEXLINK_PXN set): every rank starts its proxy and the proxy's group
// service when a communicator that spans hosts is made, since any rank may
// be the relay of a group it is not in. The service's hand-off links are a
// hidden communicator of the host's members (its own shm links: the
// communicator's belong to its calls), closed with the proxy.

// handoffLinks adapts the hidden communicator's links to proxy.Local: the
// proxy names peers by their rank in the communicator, the links by their
// rank in the hidden one.
type handoffLinks struct {
	s   *linkSet
	idx map[int]int // communicator rank -> hidden communicator rank
}

func (l handoffLinks) Send(p int, tag fabric.Tag, b []byte) fabric.Request {
	return l.s.post(l.idx[p], true, tag, collectives.HostBuffer(b))
}
func (l handoffLinks) Recv(p int, tag fabric.Tag, b []byte) fabric.Request {
	return l.s.post(l.idx[p], false, tag, collectives.HostBuffer(b))
}

// startPXNGroup starts c's proxy and its group service when
// FLEXLINK_PXN_GROUP asks for it and PXN applies to c. Every member calls
// it, at c's creation. A proxy that cannot start leaves groups on the
// communicator's links (logged); only a failure to publish is an error.
func startPXNGroup(ctx context.Context, c *Comm) error {
	w := c.world
	if !w.env.Bool("FLEXLINK_PXN_GROUP") || w.net.cfg.PXN < 0 || !w.needsNet(c.members) || w.mode != "auto" {
		return nil
	}
	// No route with a relay (level 0, one rail): groups need no service.
	// (A plan that fails is logged by pxnProxy on the first all-to-all.)
	if plan, err := pxnPlan(c); err != nil || !slices.ContainsFunc(plan.Routes, func(r pxn.Route) bool { return r.Via != r.Src }) {
		return nil
	}
	px, err := pxnProxy(ctx, c)
	if px == nil || err != nil {
		return err
	}
	var local []int // world ranks of c on this host, in c's order
	idx := map[int]int{}
	for r, m := range c.members {
		if w.hosts[m] == w.host {
			idx[r] = len(local)
			local = append(local, m)
		}
	}
	hc, err := c.sub(ctx, c.name+".pxg", local)
	if err != nil {
		return fmt.Errorf("rank %d on %s: PXN group service links: %w", w.store.Rank(), w.host, err)
	}
	c.pxn.mu.Lock()
	c.pxn.handoff = hc
	c.pxn.mu.Unlock()
	px.Serve(handoffLinks{s: hc.links, idx: idx}, func(err error) { pxnServiceFailed(c, err) })
	return nil
}

// pxnServiceFailed ends the communicator on every member when the group
// service fails outside a call (a relay's connection broke): after the
// bootstrap's own news if a peer was lost (it names the root cause), else
// with err.
func pxnServiceFailed(c *Comm, err error) {
	if c.fate.ended() != nil {
		return
	}
	if errors.Is(err, errs.ErrPeerLost) {
		t := time.NewTimer(rootCauseWait)
		defer t.Stop()
		select {
		case <-c.fate.done:
			return
		case <-t.C:
		}
	}
	c.Revoke(fmt.Errorf("rank %d on %s: pxn group service: %w", c.WorldRank(), c.world.host, err))
}

// pxnGroupProxy is c's proxy when its group service runs, else nil.
func pxnGroupProxy(c *Comm) *proxy.Proxy {
	c.pxn.mu.Lock()
	defer c.pxn.mu.Unlock()
	if c.pxn.px == nil || !c.pxn.px.Serving() {
		return nil
	}
	return c.pxn.px
}

// PXNGroup runs a group of sends and receives (collectives.Engine.Group's
// semantics): with the PXN group service running, the host-buffer
// entries with a peer on another host go through the proxy (a relay's
// stream, or this rank's own when it is on the peer's rail), the others
// (same host, itself) over the communicator's links, both at once.
// Messages of one pair always take the same way, so their order holds.
// Call it inside Run.
func (c *Comm) PXNGroup(ctx context.Context, ops []collectives.P2P) error {
	px := pxnGroupProxy(c)
	if px == nil {
		return c.engine.Group(ctx, ops)
	}
	var rest []collectives.P2P
	var sends, recvs []proxy.Msg
	for _, op := range ops {
		b, ok := op.Buf.(collectives.HostBuffer)
		if op.Buf == nil {
			ok = true
		}
		switch {
		case ok && op.Peer >= 0 && op.Peer < c.size && op.Send && px.Proxied(c.rank, op.Peer):
			sends = append(sends, proxy.Msg{Peer: op.Peer, Buf: b})
		case ok && op.Peer >= 0 && op.Peer < c.size && !op.Send && px.Proxied(op.Peer, c.rank):
			recvs = append(recvs, proxy.Msg{Peer: op.Peer, Buf: b})
		default:
			rest = append(rest, op)
		}
	}
	if len(sends)+len(recvs) == 0 {
		return c.engine.Group(ctx, ops)
	}
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type result struct {
		st  proxy.Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := px.Group(gctx, sends, recvs)
		if err != nil {
			cancel(err)
		}
		done <- result{st, err}
	}()
	var err error
	if len(rest) > 0 {
		if err = c.engine.Group(gctx, rest); err != nil {
			cancel(err)
		}
	}
	res := <-done
	st := res.st
	flog.Sub(c.world.log, flog.Net).Info("pxn group", "comm", c.name, "sends", len(sends), "receives", len(recvs), "on_host", len(rest),
		"received", st.Received, "receives_posted", st.Receives)
	switch first := context.Cause(gctx); {
	case res.err != nil && (err == nil || first == res.err):
		return fmt.Errorf("rank %d: group of %d send/recv (%d through PXN relays): %w", c.rank, len(ops), len(sends)+len(recvs), res.err)
	case err != nil:
		return err
	}
	return nil
}

// quiescePXN tells c's group service, before the closing barrier, that
// the local ranks' hand-off links will end (proxy.Proxy.Quiesce).
func quiescePXN(c *Comm) {
	c.pxn.mu.Lock()
	defer c.pxn.mu.Unlock()
	if c.pxn.px != nil {
		c.pxn.px.Quiesce()
	}
}

// closePXNGroup stops nothing itself (the proxy stops its service); it
// releases the hand-off links after the proxy closed, without the
// closing barrier (the service's readers hold receives on them).
func closePXNGroup(hc *Comm) {
	if hc == nil {
		return
	}
	hc.world.unregister(hc)
	hc.links.close()
	hc.eps.close()
}
