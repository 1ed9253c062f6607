package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/multilink"
	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/flog"
)

// addrFunc returns a peer's endpoint address for a transport kind; for the
// world it comes from the join exchange, for sub-communicators from the
// bootstrap key/value store.
type addrFunc func(ctx context.Context, worldPeer int) (map[string][]byte, error)

// linkSet connects to peers lazily, on the first message, so a communicator
// of N ranks that only runs rings opens 2 links, not N-1. Messages posted
// before the link is ready are queued and issued in order once it is (the
// Link contract is FIFO, so order must survive the wait). Connecting runs in
// its own goroutine per peer, so two ranks that reach each other in
// different orders cannot deadlock.
type linkSet struct {
	c     *Comm
	ctx   context.Context // ends when the communicator closes
	stop  context.CancelCauseFunc
	addr  addrFunc
	mu    sync.Mutex
	slots map[int]*slot // comm rank -> slot
	err   error         // set by abort: every later message fails with it
}

type slot struct {
	link    fabric.Link
	err     error
	pending []pendingOp
	// planner splits a multilink's messages (nil for a single link); close
	// reports its shares for the largest message sent, maxSend bytes.
	planner *balance.Planner
	maxSend int
}

type pendingOp struct {
	send bool
	tag  fabric.Tag
	buf  []byte
	req  *fabric.Req
}

func newLinkSet(c *Comm, addr addrFunc) *linkSet {
	ctx, stop := context.WithCancelCause(context.Background())
	return &linkSet{c: c, ctx: ctx, stop: stop, addr: addr, slots: map[int]*slot{}}
}

// post issues or queues one message to the peer of comm rank peer.
func (s *linkSet) post(peer int, send bool, tag fabric.Tag, b collectives.Buffer) fabric.Request {
	var buf []byte
	if b != nil {
		hb, ok := b.(collectives.HostBuffer)
		if !ok {
			return fabric.DoneReq(fmt.Errorf("rank %d: buffer of type %T is not host memory", s.c.rank, b))
		}
		buf = hb.Bytes()
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return fabric.DoneReq(s.err)
	}
	sl := s.slots[peer]
	if sl == nil {
		sl = &slot{}
		s.slots[peer] = sl
		go s.connect(peer, sl)
	}
	if send && len(buf) > sl.maxSend {
		sl.maxSend = len(buf)
	}
	switch {
	case sl.link != nil:
		l := sl.link
		s.mu.Unlock()
		if send {
			return l.Send(tag, buf)
		}
		return l.Recv(tag, buf)
	case sl.err != nil:
		err := sl.err
		s.mu.Unlock()
		return fabric.DoneReq(err)
	default:
		r := fabric.NewReq()
		sl.pending = append(sl.pending, pendingOp{send: send, tag: tag, buf: buf, req: r})
		s.mu.Unlock()
		return r
	}
}

func (s *linkSet) connect(peer int, sl *slot) {
	wpeer := s.c.members[peer]
	link, planner, err := s.dial(wpeer)
	s.mu.Lock()
	if err == nil && s.err != nil {
		link.Close()
		err = s.err
	}
	if err != nil {
		sl.err = err
	} else {
		sl.link, sl.planner = link, planner
		flog.Sub(s.c.world.log, flog.Net).Info("link up", "comm", s.c.name, "peer", wpeer, "peer_host", s.c.world.hosts[wpeer], "kind", link.Props().Kind, "desc", link.Props().Desc)
	}
	pend := sl.pending
	sl.pending = nil
	// Issue queued messages in order while holding the lock, so a message
	// posted concurrently cannot overtake them.
	for _, p := range pend {
		if err != nil {
			p.req.Complete(err)
			continue
		}
		var r fabric.Request
		if p.send {
			r = link.Send(p.tag, p.buf)
		} else {
			r = link.Recv(p.tag, p.buf)
		}
		go chain(r, p.req)
	}
	s.mu.Unlock()
}

func chain(from fabric.Request, to *fabric.Req) {
	<-from.Done()
	to.Complete(from.Err())
}

func (s *linkSet) dial(wpeer int) (fabric.Link, *balance.Planner, error) {
	w := s.c.world
	ctx := s.ctx
	if d := w.dialTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	addrs, err := s.addr(ctx, wpeer)
	if err != nil {
		return nil, nil, fmt.Errorf("rank %d on %s: addresses of rank %d: %w", w.store.Rank(), w.host, wpeer, err)
	}
	kinds, err := w.linkKinds(s.c.eps, wpeer, addrs)
	if err != nil {
		return nil, nil, err
	}
	links := make([]fabric.Link, 0, len(kinds))
	for _, kind := range kinds {
		local, remote := transports.SplitKind(kind, w.store.Rank() < wpeer)
		l, err := s.dialKind(ctx, wpeer, local, addrs[remote])
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, nil, err
		}
		links = append(links, l)
	}
	if len(links) == 1 {
		return links[0], nil, nil
	}
	planner, err := balance.NewPlanner(multilink.Specs(links), nil, multilink.PlannerConfig(links))
	if err != nil {
		return nil, nil, fmt.Errorf("rank %d: plan links to rank %d: %w", w.store.Rank(), wpeer, err)
	}
	var tail float64
	if multilink.OverNet(links) {
		tail = w.netTail
	}
	return multilink.New(wpeer, links, planner, multilink.Options{
		NoAcks: multilink.OnDelivery(links),
		Tail:   tail,
		OnLinkFailure: func(i int, kind fabric.Kind, err error) {
			// A link the peer aborted is one the peer gave up on: it
			// closed its communicator (the end of every clean run), or it
			// saw the link fail and warned itself. Only a failure seen
			// here is worth a warning.
			if errors.Is(err, errs.ErrAborted) {
				w.log.Info("link closed by the peer", "peer", wpeer, "link", i, "kind", kind, "error", err)
				return
			}
			w.log.Warn("link failed; its traffic moves to the others", "peer", wpeer, "link", i, "kind", kind, "error", err)
		},
		OnShares: s.c.sharesLogger(wpeer, kinds),
	}), planner, nil
}

func (s *linkSet) dialKind(ctx context.Context, wpeer int, kind string, addr []byte) (fabric.Link, error) {
	w := s.c.world
	ep, ok := s.c.eps[kind]
	if !ok {
		return nil, fmt.Errorf("rank %d on %s: no %s endpoint", w.store.Rank(), w.host, kind)
	}
	if addr == nil {
		return nil, fmt.Errorf("rank %d on %s: rank %d on %s published no %s address", w.store.Rank(), w.host, wpeer, w.hosts[wpeer], kind)
	}
	link, err := ep.Connect(ctx, wpeer, addr)
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s: connect to rank %d on %s over %s: %w", w.store.Rank(), w.host, wpeer, w.hosts[wpeer], kind, err)
	}
	return link, nil
}

// abort fails every pending and later message with err.
func (s *linkSet) abort(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	var links []fabric.Link
	for _, sl := range s.slots {
		if sl.link != nil {
			links = append(links, sl.link)
		}
	}
	s.mu.Unlock()
	s.stop(err)
	for _, l := range links {
		l.Abort(err)
	}
}

// close releases every link, after logging (FLEXLINK_DEBUG=INFO) the
// shares each multilink's planner learnt.
func (s *linkSet) close() {
	s.mu.Lock()
	for p, sl := range s.slots {
		if sl.planner != nil {
			s.logShares(s.c.members[p], sl)
		}
	}
	s.mu.Unlock()
	s.abort(fmt.Errorf("communicator %s closed: %w", s.c.name, errs.ErrClosed))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.slots {
		if sl.link != nil {
			sl.link.Close()
		}
	}
}

// logShares reports the shares a multilink's planner holds, at the end,
// for the size class of the largest message this side sent over it, as
// "link shares" with the links by index, in the order of the "link up"
// line's description. They come from the planner's state, which ignores
// exclusions: a peer that closed first has aborted every link by now.
func (s *linkSet) logShares(wpeer int, sl *slot) {
	if sl.maxSend == 0 {
		return
	}
	st := sl.planner.State()
	if len(st.Classes) == 0 {
		return
	}
	c := st.Classes[len(st.Classes)-1]
	for _, k := range st.Classes {
		if k.UpTo >= sl.maxSend {
			c = k
			break
		}
	}
	parts := make([]string, len(c.Shares))
	for i, f := range c.Shares {
		parts[i] = fmt.Sprintf("%d=%.3f", i, f)
	}
	s.c.world.log.Info("link shares", "comm", s.c.name, "peer", wpeer, "peer_host", s.c.world.hosts[wpeer],
		"bytes", sl.maxSend, "shares", strings.Join(parts, " "))
}

// linkReport lists the links in use, for FLEXLINK_DEBUG=INFO and tests.
func (s *linkSet) report() []LinkReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LinkReport
	for p, sl := range s.slots {
		if sl.link == nil {
			continue
		}
		pr := sl.link.Props()
		out = append(out, LinkReport{Peer: p, WorldPeer: s.c.members[p], PeerHost: s.c.world.hosts[s.c.members[p]], Kind: string(pr.Kind), Desc: pr.Desc})
	}
	return out
}

// LinkReport: see rank.LinkReport.
type LinkReport struct {
	Peer      int    // rank in the communicator
	WorldPeer int    // rank in the world
	PeerHost  string // host of the peer
	Kind      string // shm, tcp, ...
	Desc      string
}

// peers adapts a linkSet to collectives.Peers.
type peers struct{ s *linkSet }

func (p peers) Rank() int { return p.s.c.rank }
func (p peers) Size() int { return p.s.c.size }
func (p peers) Send(peer int, tag fabric.Tag, b collectives.Buffer) fabric.Request {
	return p.s.post(peer, true, tag, b)
}
func (p peers) Recv(peer int, tag fabric.Tag, b collectives.Buffer) fabric.Request {
	return p.s.post(peer, false, tag, b)
}
