package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"flexlink/fabric"
	"flexlink/fabric/net"
	"flexlink/internal/errs"
)

// Msg is one send or receive of a Group: the bytes for Peer, or the
// buffer for Peer's next message (of exactly its length).
type Msg struct {
	Peer int
	Buf  []byte
}

// Relayed reports whether a message from s to d goes through the group
// service: d on another host and Via(s, d) another rank of s's host.
// Everything else (same host, or s on d's rail) is the caller's to carry
// over the communicator's links.
func (p *Proxy) Relayed(s, d int) bool {
	h := p.cfg.Hosts
	return h[s] != h[d] && p.cfg.Via(s, d) != s
}

// Serving reports whether the group service runs (Serve was called).
func (p *Proxy) Serving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.svc != nil
}

// Group sends and receives messages whose route goes through a relay
// (Relayed true for each: this rank to a send's peer, a receive's peer to
// this rank), following the PXN routes: a send is handed in chunks over
// the hand-off link to the relay, which sends it from its NIC on the
// connection it keeps for (this rank, peer); a receive takes the peer's
// next message from the connection its relay keeps for (peer, this rank).
// Messages between a pair are matched in order, within and across Groups;
// a receive whose length differs from the message's fails with
// errs.ErrMismatch naming both ranks. It returns when every send has left
// the relay's NIC and every receive has landed, or fails (ctx, the job's
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
	}
	bySend, byRecv := map[int][][]byte{}, map[int][][]byte{}
	for _, m := range sends {
		if m.Peer < 0 || m.Peer >= len(p.cfg.Hosts) || !p.Relayed(me, m.Peer) {
			return st, fmt.Errorf("rank %d proxy: group send to rank %d does not go through a relay", me, m.Peer)
		}
		bySend[m.Peer] = append(bySend[m.Peer], m.Buf)
	}
	for _, m := range recvs {
		if m.Peer < 0 || m.Peer >= len(p.cfg.Hosts) || !p.Relayed(m.Peer, me) {
			return st, fmt.Errorf("rank %d proxy: group receive from rank %d does not go through a relay", me, m.Peer)
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
	posted, later := g.postRecvs(byRecv)
	for _, r := range posted {
		c.goWait(func() error { return g.wait(r) })
	}
	for s, bufs := range later {
		c.goWait(func() error { return g.recvFrom(s, bufs) })
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
// by chunk under the flow's credits, then waits until every credit came
// back: the relay's network sends completed.
func (g groupCall) sendTo(d int, bufs [][]byte) error {
	p, sv, ctx := g.c.p, g.sv, g.c.ctx
	me := p.cfg.Rank
	v := p.cfg.Via(me, d)
	f := sv.flow(d)
	take := func() error {
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
	for range p.cfg.Credits { // every chunk sent by the relay
		if err := take(); err != nil {
			return err
		}
	}
	for range p.cfg.Credits {
		f <- struct{}{}
	}
	return nil
}

// chunkTagBits is how many bits of a message's length a chunk's tag
// carries (the ucx provider leaves 20 bits of a tag to its users).
const chunkTagBits = 19

// chunkTag is the network tag of a group message's chunk: the low bits of
// the message's length and whether the chunk is its last. Two ends that
// cut messages of different lengths differ in some chunk's tag no later
// than the last chunk of the shorter cut (or, with as many chunks, in the
// last chunk's size), so a wrong length fails the receive that meets it
// and nothing of the next message is taken.
func chunkTag(total int, last bool) uint64 {
	t := uint64(total) & (1<<chunkTagBits - 1) << 1
	if last {
		t |= 1
	}
	return t
}

// recvs is this call's receives from one sender s: every chunk of its
// messages as this rank's buffers cut them (an empty message: one empty
// chunk), tagged by chunkTag from the buffer's length, so that a message
// of another length fails with errs.ErrMismatch.
type recvs struct {
	s, v   int // the sender and its relay
	bufs   [][]byte
	starts []func() (net.Request, error)
	pieces []piece
	ops    []*Op
}

// piece is one chunk's receive: message msg's chunk k, n bytes.
type piece struct{ msg, k, n int }

// cut plans s's receives from the connection rc that s's relay keeps for
// (s, this rank).
func (g groupCall) cut(s int, bufs [][]byte, rc net.RecvConn) *recvs {
	p := g.c.p
	me := p.cfg.Rank
	r := &recvs{s: s, v: p.cfg.Via(s, me), bufs: bufs}
	for i, b := range bufs {
		nk := max(1, p.chunks(len(b)))
		for k := range nk {
			ch := b[:0]
			if len(b) > 0 {
				ch = p.chunk(b, k)
			}
			tag := chunkTag(len(b), k == nk-1)
			r.starts = append(r.starts, func() (net.Request, error) { return rc.IRecv([][]byte{ch}, []uint64{tag}, nil) })
			r.pieces = append(r.pieces, piece{msg: i, k: k, n: len(ch)})
		}
	}
	return r
}

// postRecvs posts the receives of every sender whose connection is
// there in one batch (one wake-up of the engine), and returns the others,
// whose connection is still to come.
func (g groupCall) postRecvs(byRecv map[int][][]byte) (posted []*recvs, later map[int][][]byte) {
	p := g.c.p
	me := p.cfg.Rank
	var starts []func() (net.Request, error)
	later = map[int][][]byte{}
	for s, bufs := range byRecv {
		rc := p.conns.ready(peerKey{From: p.cfg.Via(s, me), For: s})
		if rc == nil {
			later[s] = bufs
			continue
		}
		r := g.cut(s, bufs, rc)
		posted = append(posted, r)
		starts = append(starts, r.starts...)
	}
	ops := p.eng.PostAll(g.c.ctx, starts...)
	for _, r := range posted {
		r.ops, ops = ops[:len(r.starts)], ops[len(r.starts):]
	}
	return posted, later
}

// recvFrom takes s's messages (in order) once s's relay connected for
// (s, this rank), then waits for them.
func (g groupCall) recvFrom(s int, bufs [][]byte) error {
	p, c := g.c.p, g.c
	me := p.cfg.Rank
	v := p.cfg.Via(s, me)
	rc, err := p.conns.from(c.ctx, peerKey{From: v, For: s})
	if err != nil {
		return fmt.Errorf("rank %d: receive from rank %d via relay rank %d on %s: %w", me, s, v, p.cfg.Hosts[v], err)
	}
	r := g.cut(s, bufs, rc)
	r.ops = p.eng.PostAll(c.ctx, r.starts...)
	return g.wait(r)
}

// wait waits for r's receives, in order.
func (g groupCall) wait(r *recvs) error {
	p, c := g.c.p, g.c
	me, s, v := p.cfg.Rank, r.s, r.v
	atomic.AddInt64(&c.st.Receives, int64(len(r.ops)))
	atomic.AddInt64(&c.st.Buffers, int64(len(r.ops)))
	for i, op := range r.ops {
		pc := r.pieces[i]
		sizes, err := op.Wait(c.ctx)
		if errors.Is(err, errs.ErrMismatch) { // the tag: the sender's length
			return fmt.Errorf("rank %d: message %d from rank %d (via relay rank %d) is not %d bytes long, as the receive is (chunk tags differ): %w",
				me, pc.msg, s, v, len(r.bufs[pc.msg]), err)
		}
		if err != nil {
			return fmt.Errorf("rank %d: receive of %d bytes (message %d, chunk %d) from rank %d via relay rank %d on %s: %w",
				me, len(r.bufs[pc.msg]), pc.msg, pc.k, s, v, p.cfg.Hosts[v], err)
		}
		atomic.AddInt64(&c.st.Received, 1)
		if sizes[0] != pc.n {
			return fmt.Errorf("rank %d: chunk %d of message %d from rank %d via relay rank %d has %d bytes, want %d: %w", me, pc.k, pc.msg, s, v, sizes[0], pc.n, errs.ErrMismatch)
		}
	}
	return nil
}
