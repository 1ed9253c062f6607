package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// Msg is one send or receive of a Group: the bytes for Peer, or the
// buffer for Peer's next message (of exactly its length).
type Msg struct {
	Peer int
	Buf  []byte
}

// Proxied reports whether a message from s to d goes through the group
// service: d on another host. Its route (Via) decides whose stream
// carries it: a relay's, or s's own proxy's when s is on d's rail (or
// cannot be relayed). Everything else (same host, itself) is the caller's
// to carry over the communicator's links.
func (p *Proxy) Proxied(s, d int) bool {
	h := p.cfg.Hosts
	return h[s] != h[d]
}

// Serving reports whether the group service runs (Serve was called).
func (p *Proxy) Serving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.svc != nil
}

// Group sends and receives messages to and from ranks on other hosts
// (Proxied true for each), following the PXN routes: a send is handed in
// chunks over the hand-off link to the relay, which sends it from its NIC
// on its stream to peer (a rank on peer's rail puts its chunks on its own
// stream); the receives from the senders one relay carries are
// taken from that relay's stream in multi-receives, a round of chunks
// (one per sender) each, after this rank told the relay the rounds
// (clear-to-send).
// Messages between a pair are matched in order, within and across Groups;
// a receive whose length differs from the message's fails with
// errs.ErrMismatch naming both ranks. It returns when every send is
// staged at its relay (sendTo: the buffers are the caller's again, the
// relay delivers later, and a failure after that ends the job through the
// relay's report) and every receive has landed, or fails (ctx, the job's
// end, a relay or peer lost) with the ranks named; a failure aborts the
// proxy. Unlike AllToAllv, only the ranks with messages take part.
func (p *Proxy) Group(ctx context.Context, sends, recvs []Msg) (Stats, error) {
	var st Stats
	me := p.cfg.Rank
	p.mu.Lock()
	sv, err := p.svc, p.err
	p.mu.Unlock()
	switch {
	case err != nil:
		return st, fmt.Errorf("rank %d proxy: aborted earlier: %w", me, err)
	case sv == nil:
		return st, fmt.Errorf("rank %d proxy: group send/recv without the group service", me)
	case sv.ctx.Err() != nil:
		return st, fmt.Errorf("rank %d proxy: the group service ended: %w", me, sv.err())
	}
	bySend, byRecv := map[int][][]byte{}, map[int][][]byte{}
	for _, m := range sends {
		if m.Peer < 0 || m.Peer >= len(p.cfg.Hosts) || !p.Proxied(me, m.Peer) {
			return st, fmt.Errorf("rank %d proxy: group send to rank %d, which is not on another host", me, m.Peer)
		}
		bySend[m.Peer] = append(bySend[m.Peer], m.Buf)
	}
	for _, m := range recvs {
		if m.Peer < 0 || m.Peer >= len(p.cfg.Hosts) || !p.Proxied(m.Peer, me) {
			return st, fmt.Errorf("rank %d proxy: group receive from rank %d, which is not on another host", me, m.Peer)
		}
		byRecv[m.Peer] = append(byRecv[m.Peer], m.Buf)
	}
	c := &a2a{p: p, st: &st}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	defer c.cancel(nil)
	g := groupCall{c: c, sv: sv}
	for d, bufs := range bySend {
		c.goWait(func() error { return g.sendTo(d, bufs) })
	}
	byVia := map[int]map[int][][]byte{}
	for s, bufs := range byRecv {
		v := p.cfg.Via(s, me)
		if byVia[v] == nil {
			byVia[v] = map[int][][]byte{}
		}
		byVia[v][s] = bufs
	}
	for v, senders := range byVia {
		c.goWait(func() error { return g.recvVia(v, senders) })
	}
	err = c.settle() // before st is read: the call's goroutines fill it
	return st, err
}

// groupCall is one Group call on the service sv.
type groupCall struct {
	c  *a2a
	sv *service
}

// cause is why the call or the service ended.
func (g groupCall) cause() error {
	if g.sv.ctx.Err() != nil {
		return g.sv.err()
	}
	return g.c.cause()
}

// sendTo hands this rank's messages for d (in order) to d's relay, chunk
// by chunk under the flow's credits (into a staging slot of its own
// stream to d, when it is the relay), and returns once every chunk is
// staged: the buffers are the caller's again. The relay's network sends
// complete later and return the credits; until then the flow's next
// chunks wait. So a send does not wait for the other senders that d
// takes in the same rounds (stream.go) unless this rank's chunks for d
// not yet sent (this call's and earlier ones') are more than Credits (4
// MiB by default), as in NCCL, whose sends wait once the connection's
// buffers are full. On an error the buffers may still be read until the
// job ends (a hand-off already posted): the communicator is unusable then
// anyway.
func (g groupCall) sendTo(d int, bufs [][]byte) error {
	p, sv, ctx := g.c.p, g.sv, g.c.ctx
	me := p.cfg.Rank
	v := p.cfg.Via(me, d)
	f := sv.flow(d)
	take := func() error {
		if sv.ctx.Err() != nil { // before the select, which could take a credit first
			return fmt.Errorf("rank %d: send to rank %d via relay rank %d: %w", me, d, v, g.cause())
		}
		select {
		case <-f:
			return nil
		case <-ctx.Done():
		case <-sv.ctx.Done():
		}
		return fmt.Errorf("rank %d: send to rank %d via relay rank %d: %w", me, d, v, g.cause())
	}
	// The hand-offs are posted as credits allow, without waiting for the
	// previous one: the relay has a slot for each (a broken link fails
	// the service, which ends take's wait).
	var reqs []fabric.Request
	for _, b := range bufs {
		for k := range max(1, p.chunks(len(b))) {
			if err := take(); err != nil {
				return err
			}
			ch := b[:0]
			if len(b) > 0 {
				ch = p.chunk(b, k)
			}
			kind := hdrData
			if k == max(1, p.chunks(len(b)))-1 {
				kind = hdrLast
			}
			if v == me {
				buf := p.stage.Get().(*[]byte)
				copy(*buf, ch)
				sv.hold(me, d) // under this flow's credit: never refused
				sv.streamTo(d).in <- staged{buf: buf, n: len(ch), total: len(b), last: kind == hdrLast, from: me}
				continue
			}
			r1, r2 := sv.send(v, header(kind, d, len(ch), len(b)), ch)
			reqs = append(reqs, r1)
			if r2 != nil {
				reqs = append(reqs, r2)
			}
		}
	}
	if err := fabric.WaitAll(ctx, reqs...); err != nil {
		return fmt.Errorf("rank %d: hand rank %d's message to relay rank %d: %w", me, d, v, err)
	}
	if sv.ctx.Err() != nil { // the service ended meanwhile: what was staged may never leave
		return fmt.Errorf("rank %d: send to rank %d via relay rank %d: %w", me, d, v, g.cause())
	}
	return nil
}

// recvVia takes this call's messages from the senders that relay v
// carries for this rank (each sender's buffers, in order): it tells v the
// batches it will take them in (clear-to-send), posts one multi-receive
// per batch on v's stream, and waits for them in order.
func (g groupCall) recvVia(v int, senders map[int][][]byte) error {
	p, c := g.c.p, g.c
	me, host := p.cfg.Rank, p.cfg.Hosts[v]
	bs := p.planRecvs(senders)
	sc, err := p.conns.to(c.ctx, v, connCTS)
	if err != nil {
		return fmt.Errorf("rank %d: clear-to-send to relay rank %d on %s: %w", me, v, host, err)
	}
	var starts []func() (net.Request, error)
	for _, m := range encodeCTS(bs) {
		starts = append(starts, func() (net.Request, error) { return sc.ISend(m, ctsTag, nil) })
	}
	cts := p.eng.PostAll(c.ctx, starts...)
	rc, err := p.conns.from(c.ctx, peerKey{From: v, Kind: connGroup})
	if err != nil {
		return fmt.Errorf("rank %d: receive via relay rank %d on %s: %w", me, v, host, err)
	}
	recvs := make([]func() (net.Request, error), len(bs))
	for j, b := range bs {
		tags := make([]uint64, len(b.wants))
		for i, w := range b.wants {
			tags[i] = uint64(w.s)
		}
		recvs[j] = func() (net.Request, error) { return rc.IRecv(b.bufs, tags, nil) }
	}
	ops := p.eng.PostAll(c.ctx, recvs...)
	for _, op := range cts {
		if _, err := op.Wait(c.ctx); err != nil {
			if merr := g.mismatched(v, bs, ops); merr != nil {
				return merr
			}
			return fmt.Errorf("rank %d: clear-to-send to relay rank %d on %s: %w", me, v, host, err)
		}
	}
	for i, op := range ops {
		if err := g.took(v, bs[i], op); err != nil {
			return err
		}
	}
	return nil
}

// mismatched is the mismatch that one of the batches' multi-receives
// (ops) from relay v has already failed with, if any. A relay that finds
// a mismatch sends its mark (the receive fails with errs.ErrMismatch as
// the mark arrives, before it is acknowledged), waits for the mark's
// acknowledgement, and then aborts, closing its connections: the
// clear-to-send messages it has not acknowledged yet fail as its
// connection closes. So when a clear-to-send fails, a receive that the
// relay's mismatch failed has failed already, and that is the cause.
func (g groupCall) mismatched(v int, bs []batch, ops []*Op) error {
	for i, op := range ops {
		select {
		case <-op.Done():
		default:
			continue
		}
		if err := g.took(v, bs[i], op); errors.Is(err, errs.ErrMismatch) {
			return err
		}
	}
	return nil
}

// took waits for one batch's multi-receive from relay v and checks that
// each buffer got its whole chunk.
func (g groupCall) took(v int, b batch, op *Op) error {
	p, c := g.c.p, g.c
	me := p.cfg.Rank
	atomic.AddInt64(&c.st.Receives, 1)
	atomic.AddInt64(&c.st.Buffers, int64(len(b.bufs)))
	sizes, err := op.Wait(c.ctx)
	if err != nil {
		var from []int
		for _, w := range b.wants {
			from = append(from, w.s)
		}
		what := fmt.Sprint("rank ", from[0])
		if len(from) > 1 {
			what = fmt.Sprint("ranks ", from)
		}
		if errors.Is(err, errs.ErrMismatch) {
			return fmt.Errorf("rank %d: a message from %s via relay rank %d is not as long as its receive (the relay compared them): %w", me, what, v, err)
		}
		return fmt.Errorf("rank %d: receive from %s via relay rank %d on %s: %w", me, what, v, p.cfg.Hosts[v], err)
	}
	for i, n := range sizes {
		if w := b.wants[i]; n != len(b.bufs[i]) {
			return fmt.Errorf("rank %d: message %d from rank %d (via relay rank %d) is not %d bytes long, as the receive is (the relay compared them): %w",
				me, b.msgs[i], w.s, v, w.total, errs.ErrMismatch)
		}
	}
	atomic.AddInt64(&c.st.Received, int64(len(sizes)))
	return nil
}
