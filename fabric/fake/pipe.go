package fake

import (
	"fmt"
	"sync"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// inlineLimit is the largest unsegmented message copied by the goroutine
// that completes the match (the poster of the send or the receive); larger
// ones get a goroutine of their own so that Send and Recv stay cheap.
const inlineLimit = 64 << 10

// pipe is one direction, from -> to, of a pair of ranks: the queue of
// posted sends and the queue of posted receives, matched head to head.
type pipe struct {
	nw       *Network
	from, to int

	mu      sync.Mutex
	sends   []*message // posted, not yet matched (FIFO)
	recvs   []*posting // posted, not yet matched (FIFO)
	sendErr error      // set once: what the sender's requests fail with
	recvErr error      // set with sendErr: what the receiver's requests fail with
	dead    chan struct{}
	// Time model (used only when the network is timed).
	wireFree   time.Time // when the wire can start the next byte
	lastArrive time.Time // arrival of the previous segment: nothing overtakes it
}

type message struct {
	tag    fabric.Tag
	buf    []byte
	req    *fabric.Req
	arrive []time.Time // arrival of each segment; nil when untimed
	ready  bool        // the first segment has arrived: the message may match
}

type posting struct {
	tag fabric.Tag
	buf []byte
	req *fabric.Req
}

type match struct {
	m *message
	r *posting
}

func (p *pipe) send(tag fabric.Tag, buf []byte) fabric.Request {
	m := &message{tag: tag, buf: buf, req: fabric.NewReq(), ready: !p.nw.timed}
	var wait time.Duration
	p.mu.Lock()
	if p.sendErr != nil {
		err := p.sendErr
		p.mu.Unlock()
		return fabric.DoneReq(err)
	}
	if p.nw.timed {
		m.arrive = p.schedule(len(buf))
		if wait = time.Until(m.arrive[0]); wait <= 0 {
			m.ready = true
		}
	}
	p.sends = append(p.sends, m)
	ms := p.matchLocked()
	p.mu.Unlock()
	if !m.ready {
		time.AfterFunc(wait, func() { p.arrived(m) })
	}
	p.deliver(ms)
	return m.req
}

func (p *pipe) recv(tag fabric.Tag, buf []byte) fabric.Request {
	r := &posting{tag: tag, buf: buf, req: fabric.NewReq()}
	p.mu.Lock()
	if p.recvErr != nil {
		err := p.recvErr
		p.mu.Unlock()
		return fabric.DoneReq(err)
	}
	p.recvs = append(p.recvs, r)
	ms := p.matchLocked()
	p.mu.Unlock()
	p.deliver(ms)
	return r.req
}

// arrived is the timer callback of a message whose first segment is due.
func (p *pipe) arrived(m *message) {
	p.mu.Lock()
	m.ready = true
	ms := p.matchLocked()
	p.mu.Unlock()
	p.deliver(ms)
}

// schedule gives a new message of n bytes its segments' arrival times:
// each segment occupies the wire for len/Bandwidth after the previous one
// left it, then travels Latency plus this message's jitter, and never
// arrives before the segment ahead of it (FIFO). Called with p.mu held.
func (p *pipe) schedule(n int) []time.Time {
	opt := p.nw.opt
	segs := segments(n, opt.MaxSegment)
	delay := opt.Latency + p.nw.jitter()
	start := time.Now()
	if p.wireFree.After(start) {
		start = p.wireFree
	}
	arrive := make([]time.Time, len(segs))
	for i, s := range segs {
		if opt.Bandwidth > 0 {
			start = start.Add(time.Duration(float64(s) / opt.Bandwidth * float64(time.Second)))
		}
		a := start.Add(delay)
		if a.Before(p.lastArrive) {
			a = p.lastArrive
		}
		arrive[i], p.lastArrive = a, a
	}
	p.wireFree = start
	return arrive
}

// segments splits n bytes into pieces of at most max (all of it when max
// is 0); an empty message is one empty piece.
func segments(n, max int) []int {
	if max <= 0 || n <= max {
		return []int{n}
	}
	segs := make([]int, 0, (n+max-1)/max)
	for n > 0 {
		s := min(n, max)
		segs = append(segs, s)
		n -= s
	}
	return segs
}

// matchLocked pops the head pairs that can move. Called with p.mu held.
func (p *pipe) matchLocked() []match {
	var ms []match
	for len(p.sends) > 0 && len(p.recvs) > 0 && p.sends[0].ready {
		ms = append(ms, match{p.sends[0], p.recvs[0]})
		p.sends[0], p.recvs[0] = nil, nil
		p.sends, p.recvs = p.sends[1:], p.recvs[1:]
	}
	return ms
}

// deliver checks each matched pair and moves its bytes. Called without
// locks.
func (p *pipe) deliver(ms []match) {
	for _, x := range ms {
		m, r := x.m, x.r
		switch {
		case m.tag != r.tag:
			r.req.Complete(&fabric.TagMismatchError{Peer: p.from, Want: r.tag, Got: m.tag})
			m.req.Complete(nil)
		case len(m.buf) != len(r.buf):
			r.req.Complete(fmt.Errorf("fake link %d->%d: message of %d bytes for a receive of %d bytes: %w",
				p.to, p.from, len(m.buf), len(r.buf), errs.ErrMismatch))
			m.req.Complete(nil)
		case len(m.arrive) > 1 || (m.arrive == nil && (len(segments(len(m.buf), p.nw.opt.MaxSegment)) > 1 || len(m.buf) > inlineLimit)):
			go p.transfer(m, r)
		default:
			p.transfer(m, r)
		}
	}
}

// transfer copies a matched message segment by segment, waiting for each
// segment's arrival when time is modelled and giving up when the pipe
// fails in the middle.
func (p *pipe) transfer(m *message, r *posting) {
	segs := segments(len(m.buf), p.nw.opt.MaxSegment)
	off := 0
	for i, s := range segs {
		if m.arrive != nil {
			if d := time.Until(m.arrive[i]); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-p.dead:
					t.Stop()
				}
			}
		}
		select {
		case <-p.dead:
			p.mu.Lock()
			se, re := p.sendErr, p.recvErr
			p.mu.Unlock()
			r.req.Complete(re)
			m.req.Complete(se)
			return
		default:
		}
		copy(r.buf[off:off+s], m.buf[off:off+s])
		off += s
	}
	if h := p.nw.opt.OnDeliver; h != nil {
		h(p.from, p.to, len(m.buf))
	}
	r.req.Complete(nil)
	m.req.Complete(nil)
}

// fail sets the pipe's errors (the first failure wins) and fails every
// pending request; transfers in progress notice at their next segment.
func (p *pipe) fail(sendErr, recvErr error) {
	p.mu.Lock()
	if p.sendErr != nil {
		p.mu.Unlock()
		return
	}
	p.sendErr, p.recvErr = sendErr, recvErr
	close(p.dead)
	sends, recvs := p.sends, p.recvs
	p.sends, p.recvs = nil, nil
	p.mu.Unlock()
	for _, m := range sends {
		m.req.Complete(sendErr)
	}
	for _, r := range recvs {
		r.req.Complete(recvErr)
	}
}
