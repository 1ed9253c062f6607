package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/fabric"
)

// The group service carries grouped sends and receives (Proxy.Group)
// whose route goes through a relay: a message from s for d on another
// host, when Via(s, d) is another rank v of s's host.
//
// It runs for the proxy's lifetime, not inside a call, because the relay
// v is usually in no group at all (or in another collective) when s's
// group needs it. Every rank's service reads, from every other rank of its
// host, a hand-off link of its own (Serve's links: not the communicator's,
// whose FIFO messages belong to whatever call is running). On it a rank
// writes fixed-size headers, each followed for data by one payload:
//
//	data:   (hdrData or hdrLast, d, n, total) then n bytes: one chunk of
//	        the sender's message for d, whose length is total; hdrLast on
//	        its last chunk (an empty message is one last chunk of 0 bytes,
//	        with no payload)
//	credit: (hdrCredit, d, 0, 0): the relay sent one of the reader's
//	        chunks for d on the network; the staging slot is free again
//
// Head-of-line blocking is what a shared hand-off link risks: if v could
// not take s's chunk for d (d not receiving yet), s's chunk for e behind it
// would wait too. So every (sender, destination) has Credits slots at the
// relay and the sender writes a chunk only with a credit of its own flow in
// hand: whatever arrives has a slot, the reader never waits for anything
// but the link, and a destination that is late holds back only the flows
// to it. The relay sends every local sender's chunks for d on one stream
// from its NIC (stream.go), in the batches d announced on its
// clear-to-send (cts.go), and d takes each batch in one multi-receive
// whose buffers are tagged with their senders. The relay checks every
// message's length against the one d receives; a message of another
// length fails the receive (errs.ErrMismatch) before it takes anything of
// the next message.
//
// A sender's send completes when every chunk is staged at the relay
// (groupCall.sendTo); the credits come back as the relay's network sends
// complete. A failure outside any call (the relay's connection to d
// breaks, a destination dies) aborts the proxy and calls onFail, which
// ends the job with the error naming the ranks; the job's end fails the
// groups still waiting.
type service struct {
	p       *Proxy
	h       Local
	onFail  func(error)
	ctx     context.Context
	cancel  context.CancelCauseFunc
	post    map[int]*sync.Mutex // per local peer: a header and its payload are posted together
	mu      sync.Mutex
	flows   map[int]chan struct{} // sender side: credits of this rank's flow to d
	held    map[[2]int]int        // relay side: chunks of (s, d) staged or on their way
	streams map[int]*dstream      // relay side: d -> its stream
	wg      sync.WaitGroup
	closed  atomic.Bool
	quiet   atomic.Bool // closing: a hand-off link that ends is no failure (Quiesce)
}

// Hand-off header kinds and wire layout: four little-endian u64.
const (
	hdrData = iota + 1
	hdrLast
	hdrCredit
	hdrLen = 32
)

var (
	tagHdr     = fabric.Tag{0x70786e6772700001} // "pxngrp" header
	tagPayload = fabric.Tag{0x70786e6772700002}
)

// connectTimeout bounds a relay's connection (and hello) to a destination.
const connectTimeout = 60 * time.Second

func header(kind, d, n, total int) []byte {
	b := make([]byte, 0, hdrLen)
	for _, v := range []int{kind, d, n, total} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func parseHeader(b []byte) (kind, d, n, total int) {
	u := func(i int) int { return int(binary.LittleEndian.Uint64(b[8*i:])) }
	return u(0), u(1), u(2), u(3)
}

// Serve starts the group service (see service above) over h, this rank's
// dedicated links to the other ranks of its host (FIFO per peer, nothing
// else on them). Every rank of the communicator starts it, at the same
// point (the communicator's creation), since any of them may be a relay.
// onFail is called once if the service fails outside a call (it should
// end the job). Call it at most once, before Group.
func (p *Proxy) Serve(h Local, onFail func(error)) {
	sv := &service{p: p, h: h, onFail: onFail, post: map[int]*sync.Mutex{}, flows: map[int]chan struct{}{}, held: map[[2]int]int{}, streams: map[int]*dstream{}}
	sv.ctx, sv.cancel = context.WithCancelCause(context.Background())
	me := p.cfg.Rank
	for q, host := range p.cfg.Hosts {
		if q != me && host == p.cfg.Hosts[me] {
			sv.post[q] = &sync.Mutex{}
		}
	}
	for q := range sv.post {
		sv.wg.Add(1)
		go sv.read(q)
	}
	sv.wg.Add(1)
	go sv.serveCTS()
	p.mu.Lock()
	p.svc = sv
	p.mu.Unlock()
}

// Quiesce tells the group service that the communicator is closing: a
// local rank's hand-off link that ends from now on is that rank closing,
// not a failure (the relay's network failures still are). Call it before
// the closing barrier, after which the ranks close their links.
func (p *Proxy) Quiesce() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.svc != nil {
		p.svc.quiet.Store(true)
	}
}

// close stops the service (the proxy is closing): its goroutines end, and
// nothing it does from now on is a failure.
func (sv *service) close() {
	sv.mu.Lock() // with streamTo's check: no stream starts after this
	sv.closed.Store(true)
	sv.cancel(errors.New("pxn group service closed"))
	sv.mu.Unlock()
	sv.wg.Wait()
}

// fail aborts the proxy with err and reports it, once.
func (sv *service) fail(err error) {
	if sv.claim(err) {
		sv.report(err)
	}
}

// claim makes err the service's failure, unless it failed or closed
// already: the failures other goroutines see from then on are its echo.
func (sv *service) claim(err error) bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.closed.Load() || sv.ctx.Err() != nil {
		return false
	}
	sv.cancel(err)
	return true
}

// report aborts the proxy with the claimed err and tells onFail.
func (sv *service) report(err error) {
	sv.p.Abort(err)
	if sv.onFail != nil {
		sv.onFail(err)
	}
}

// send posts a header (and its payload, if any) to local rank q.
func (sv *service) send(q int, hdr, payload []byte) (r1, r2 fabric.Request) {
	m := sv.post[q]
	m.Lock()
	defer m.Unlock()
	r1 = sv.h.Send(q, tagHdr, hdr)
	if len(payload) > 0 {
		r2 = sv.h.Send(q, tagPayload, payload)
	}
	return r1, r2
}

// flow is this rank's credits toward destination d.
func (sv *service) flow(d int) chan struct{} {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	f := sv.flows[d]
	if f == nil {
		f = make(chan struct{}, sv.p.cfg.Credits)
		for range sv.p.cfg.Credits {
			f <- struct{}{}
		}
		sv.flows[d] = f
	}
	return f
}

// hold counts one more staged chunk of (s, d); false if s already has
// Credits of them (it wrote without a credit).
func (sv *service) hold(s, d int) bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	k := [2]int{s, d}
	if sv.held[k] >= sv.p.cfg.Credits {
		return false
	}
	sv.held[k]++
	return true
}

// credit returns to s the credit of one of its chunks for d, sent (its
// own flow's straight, a sibling's over the hand-off link).
func (sv *service) credit(s, d int) {
	sv.mu.Lock()
	sv.held[[2]int{s, d}]--
	sv.mu.Unlock()
	if s == sv.p.cfg.Rank {
		select {
		case sv.flow(d) <- struct{}{}:
		default:
			sv.fail(fmt.Errorf("rank %d relay: a credit of its own flow to rank %d that was not out", s, d))
		}
		return
	}
	sv.send(s, header(hdrCredit, d, 0, 0), nil)
}

// read takes what local rank q writes on its hand-off link: credits for
// this rank's flows through q, and q's chunks this rank relays.
func (sv *service) read(q int) {
	defer sv.wg.Done()
	p := sv.p
	me := p.cfg.Rank
	hdr := make([]byte, hdrLen)
	for {
		if err := sv.h.Recv(q, tagHdr, hdr).Wait(sv.ctx); err != nil {
			if !sv.quiet.Load() { // else q closed its end: the communicator is closing
				sv.fail(fmt.Errorf("rank %d pxn service: hand-off link from local rank %d: %w", me, q, err))
			}
			return
		}
		kind, d, n, total := parseHeader(hdr)
		if d < 0 || d >= len(p.cfg.Hosts) || n < 0 || n > p.cfg.Chunk || total < 0 {
			sv.fail(fmt.Errorf("rank %d pxn service: local rank %d wrote a bad header (kind %d, rank %d, %d bytes)", me, q, kind, d, n))
			return
		}
		switch kind {
		case hdrCredit:
			if q == me || p.cfg.Hosts[d] == p.cfg.Hosts[me] || p.cfg.Via(me, d) != q {
				sv.fail(fmt.Errorf("rank %d pxn service: local rank %d returned a credit for rank %d, whose messages it does not relay for this rank", me, q, d))
				return
			}
			select {
			case sv.flow(d) <- struct{}{}:
			default:
				sv.fail(fmt.Errorf("rank %d pxn service: relay rank %d returned a credit for rank %d that was not out", me, q, d))
				return
			}
		case hdrData, hdrLast:
			if q == me || !p.routesVia(q, d) {
				sv.fail(fmt.Errorf("rank %d pxn service: local rank %d handed a chunk for rank %d, which it does not reach through this relay", me, q, d))
				return
			}
			if !sv.hold(q, d) { // the sender wrote without a credit
				sv.fail(fmt.Errorf("rank %d pxn service: local rank %d handed more than %d chunks for rank %d", me, q, p.cfg.Credits, d))
				return
			}
			st := staged{n: n, total: total, last: kind == hdrLast, from: q}
			if n > 0 {
				st.buf = p.stage.Get().(*[]byte)
				if err := sv.h.Recv(q, tagPayload, (*st.buf)[:n]).Wait(sv.ctx); err != nil {
					sv.fail(fmt.Errorf("rank %d pxn service: rank %d's chunk for rank %d: %w", me, q, d, err))
					return
				}
			}
			sv.streamTo(d).in <- st // held: never full
		default:
			sv.fail(fmt.Errorf("rank %d pxn service: local rank %d wrote header kind %d", me, q, kind))
			return
		}
	}
}

// err is why the service stopped.
func (sv *service) err() error { return context.Cause(sv.ctx) }
