package multilink

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/internal/errs"
)

// Kind is the kind a multilink channel reports in its Props.
const Kind fabric.Kind = "multi"

// Options tune a channel. Both sides of a pair must use the same
// FrameBytes; the rest is local (a sender that sets NoAcks asks for no
// acknowledgements, and the receiver sends none).
type Options struct {
	// Now is the clock the part durations fed to the planner are measured
	// with; nil means time.Now. Tests inject a clock here.
	Now func() time.Time
	// Align is the granularity of split boundaries (default 4096: page
	// sized parts for copy engines; an element size keeps elements whole).
	Align int
	// FrameBytes is the size of the frame message that carries each part's
	// header, and the part itself when it fits (default 4096).
	FrameBytes int
	// OnLinkFailure is called, from a goroutine of its own, once for each
	// link that fails (index into the links given to New). The channel
	// carries on over the others.
	OnLinkFailure func(link int, kind fabric.Kind, err error)
	// NoAcks turns acknowledgements off: a part counts as delivered as
	// soon as its link's Send completes. Set it only when every link
	// completes a Send on delivery (copy-engine and rendezvous links, the
	// fake fabric); over a link that completes sends on local buffering
	// (tcp) a link failure then loses the parts that were buffered on it.
	// The default, acknowledgements, is safe on every link and costs one
	// frame per part in the other direction.
	NoAcks bool
	// OnShares, when set, is told the planner's shares for a message size
	// (indexes into the links given to New) when they are first used for
	// its size class (powers of two) and whenever one moves by two
	// percentage points or more: the balancer's decisions as they settle, for logs,
	// not once per message. It is called with the channel's lock held,
	// from the goroutine that completed a message: it must not block or
	// call the channel, and must not keep shares.
	OnShares func(bytes int, shares []balance.Share)
	// Tail is the fraction of a message of TailMin bytes or more that
	// the planner's split leaves out (0 to 0.5; 0: none): the tail is
	// handed out in pieces, each to the link whose last part of the
	// message just completed, so the links that run faster during the
	// message carry more of it and all of them finish together. Shares
	// learnt from earlier messages miss a link's rate changing within
	// one (TCP's congestion control probing over a message's length, a
	// link shared with other channels). tail.go says how pieces are cut.
	Tail float64
	// TailMin is the smallest message with a tail (0: 4 MiB).
	TailMin int
}

// Specs describes links for balance.NewPlanner from their Props, with IDs
// equal to their indexes, as New expects. A link that reports no
// bandwidth (an unthrottled in-memory link) is given 1 GB/s and one that
// reports no latency 1µs, so the planner has a finite prior to start from.
func Specs(links []fabric.Link) []balance.LinkSpec {
	out := make([]balance.LinkSpec, len(links))
	for i, l := range links {
		p := l.Props()
		out[i] = balance.LinkSpec{ID: i, Kind: p.Kind, Bandwidth: p.Bandwidth, Latency: p.Latency}
		if !(out[i].Bandwidth > 0) {
			out[i].Bandwidth = 1e9
		}
		if out[i].Latency <= 0 {
			out[i].Latency = time.Microsecond
		}
	}
	return out
}

// channel is the multilink fabric.Link. One lock, mu, guards the state of
// both directions: an ack received moves the sending side, a part
// received may wait for a Send of this side (see place).
type channel struct {
	peer  int
	links []fabric.Link
	opt   Options

	mu   sync.Mutex
	cond *sync.Cond // signalled when a receive is posted or the channel fails
	st   health     // the channel's and each link's failure
	out  outbox     // sender state
	in   inbox      // receiver state
	bal  balancer   // the planner and what it was told and said
}

// health is whether the channel, and each of its links, still works
// (c.mu held).
type health struct {
	err  error  // set once: Abort, Close, or every link lost
	dead []bool // per link: failed (and excluded from the planner)
}

// live returns a link that has not failed, or -1 when none is left.
func (h *health) live() int { return slices.Index(h.dead, false) }

// New joins links, all to rank peer, into one Link. Part sizes follow
// planner, whose link IDs must be indexes into links (see Specs); nil
// builds one from Specs(links) with the default configuration. The planner
// must not be shared with another channel: its measurements describe these
// links. New panics on an empty links slice or a planner naming a link
// that is not there, which are programming errors.
//
// The channel owns the links: Close and Abort close and abort them.
func New(peer int, links []fabric.Link, planner *balance.Planner, opts Options) fabric.Link {
	if len(links) == 0 {
		panic("multilink.New: no links")
	}
	if planner == nil {
		var err error
		if planner, err = balance.NewPlanner(Specs(links), nil, balance.Config{}); err != nil {
			panic("multilink.New: " + err.Error())
		}
	}
	for _, s := range planner.Links() {
		if s.ID < 0 || s.ID >= len(links) {
			panic(fmt.Sprintf("multilink.New: planner link id %d is not an index into %d links", s.ID, len(links)))
		}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Align <= 0 {
		opts.Align = 4096
	}
	if opts.FrameBytes < headerLen {
		opts.FrameBytes = 4096
	}
	opts.Tail = min(max(opts.Tail, 0), maxTail)
	if opts.TailMin <= 0 {
		opts.TailMin = defaultTailMin
	}
	c := &channel{
		peer: peer, links: links, opt: opts,
		st:  health{dead: make([]bool, len(links))},
		out: outbox{msgs: map[uint64]*outMsg{}, linkFree: make([]time.Time, len(links))},
		in:  inbox{msgs: map[uint64]*inMsg{}},
		bal: balancer{planner: planner, links: links, onShares: opts.OnShares},
	}
	c.cond = sync.NewCond(&c.mu)
	for j := range links {
		go (&reader{c: c, j: j}).run()
	}
	return c
}

func (c *channel) Peer() int { return c.peer }

// Props sums the bandwidth of the links still alive; the latency is the
// lowest of theirs (small messages take the fastest link).
func (c *channel) Props() fabric.Props {
	c.mu.Lock()
	dead := append([]bool(nil), c.st.dead...)
	c.mu.Unlock()
	p := fabric.Props{Kind: Kind}
	var parts []string
	for j, l := range c.links {
		lp := l.Props()
		state := ""
		if dead[j] {
			state = " (failed)"
		} else {
			p.Bandwidth += lp.Bandwidth
			if p.Latency == 0 || lp.Latency < p.Latency {
				p.Latency = lp.Latency
			}
		}
		parts = append(parts, fmt.Sprintf("%d %s: %s%s", j, lp.Kind, lp.Desc, state))
	}
	p.Desc = fmt.Sprintf("multilink to rank %d over %d links [%s]", c.peer, len(c.links), strings.Join(parts, "; "))
	return p
}

// Abort fails every pending and later request with err and aborts the
// links.
func (c *channel) Abort(err error) {
	if err == nil {
		err = fmt.Errorf("multilink to rank %d aborted: %w", c.peer, errs.ErrAborted)
	}
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
	for _, l := range c.links {
		l.Abort(err)
	}
}

// Close fails pending requests with errs.ErrClosed and closes the links.
func (c *channel) Close() error {
	c.mu.Lock()
	c.failLocked(fmt.Errorf("multilink to rank %d: %w", c.peer, errs.ErrClosed))
	c.mu.Unlock()
	var first error
	for j, l := range c.links {
		if err := l.Close(); err != nil && first == nil {
			first = fmt.Errorf("multilink to rank %d: close link %d: %w", c.peer, j, err)
		}
	}
	return first
}

// failLocked fails the channel with err (the first failure wins): every
// pending send and receive completes with it, and so will every later one.
func (c *channel) failLocked(err error) {
	if c.st.err != nil {
		return
	}
	c.st.err = err
	// A request completes only once no link uses its buffer: sends whose
	// link sends are still out, and receives with parts still being written,
	// complete when those end (the links are aborted, so they do).
	for seq, m := range c.out.msgs {
		if m.pending == 0 {
			m.req.Complete(err)
			delete(c.out.msgs, seq)
		}
	}
	for _, m := range c.in.msgs {
		if m.posted && !m.done {
			m.failed = true
			c.settleLocked(m)
		}
	}
	c.cond.Broadcast()
}

// linkDownLocked records that link j failed with err. The first time, the
// planner excludes it, OnLinkFailure hears of it, the link is aborted (so
// that the peer, which may not have seen the failure, stops using it too),
// and every part sent on it and not yet acknowledged is sent again over
// the others. When it was the last link alive the channel fails with
// errs.ErrPeerLost.
func (c *channel) linkDownLocked(j int, err error) {
	c.bal.planner.Exclude(j) // again if someone re-admitted a dead link
	if c.st.dead[j] || c.st.err != nil {
		return
	}
	c.st.dead[j] = true
	kind := c.links[j].Props().Kind
	if f := c.opt.OnLinkFailure; f != nil {
		go f(j, kind, err)
	}
	// Not under c.mu: Abort is the transport's code.
	go c.links[j].Abort(fmt.Errorf("multilink to rank %d: link %d (%s) failed: %w", c.peer, j, kind, err))
	if c.st.live() >= 0 {
		c.cond.Broadcast()
		c.resendLinkLocked(j)
		return
	}
	c.failLocked(fmt.Errorf("multilink to rank %d: all %d links failed, the last (%d, %s): %v: %w",
		c.peer, len(c.links), j, kind, err, errs.ErrPeerLost))
}
