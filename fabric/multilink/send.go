package multilink

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/internal/errs"
)

// outMsg is one Send in flight. It completes when the receiver holds every
// byte (acked covers the message) and no link still reads buf (pending is
// zero).
type outMsg struct {
	seq      uint64
	tag      fabric.Tag
	buf      []byte
	req      *fabric.Req
	parts    []*part               // every part issued, to resend those of a failed link
	pending  int                   // parts whose link sends have not completed
	acked    ranges                // bytes the receiver acknowledged
	whole    bool                  // acked covers buf (for an empty message: its part was acked)
	rest     int                   // the tail's first byte not yet issued (tail.go): rest < len(buf) while some is left
	resent   bool                  // a part failed: the timings are not clean
	observed bool                  // the timings went to the planner
	obs      []balance.Observation // per completed part
}

// part is one byte range of an outMsg sent over one link.
type part struct {
	link     int
	off, len int
	moved    bool // its link failed; what it lacked of acks went to other links
}

// outbox is the sender's state (c.mu held).
type outbox struct {
	seq      uint64             // number of the next Send
	msgs     map[uint64]*outMsg // by seq: not yet completed
	linkFree []time.Time        // per link: when its last part completed
}

// add numbers a new Send and keeps it until it completes.
func (o *outbox) add(tag fabric.Tag, buf []byte) *outMsg {
	m := &outMsg{seq: o.seq, tag: tag, buf: buf, req: fabric.NewReq()}
	o.seq++
	o.msgs[m.seq] = m
	return m
}

// service returns how long link j took over a part issued at issued and
// completed at done: from issued or, when an earlier part still occupied
// the link, from when that one completed.
func (o *outbox) service(j int, issued, done time.Time) time.Duration {
	start := issued
	if o.linkFree[j].After(start) {
		start = o.linkFree[j]
	}
	// Two parts' completions may take the lock in the other order than
	// they were timed: the link stays busy until the later one, and the
	// earlier gets no time (the planner ignores it).
	if done.After(o.linkFree[j]) {
		o.linkFree[j] = done
	}
	return max(done.Sub(start), 0)
}

// ack records that the receiver holds [off, off+n) of m.
func (m *outMsg) ack(off, n int) {
	m.acked = m.acked.add(off, n)
	m.whole = m.acked.bytes() == len(m.buf)
}

// Send splits buf by the planner's shares and sends the parts at once.
// Parts are issued in Send order on every link while c.mu is held, and
// numbered, so the receiver can put them back in order.
func (c *channel) Send(tag fabric.Tag, buf []byte) fabric.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.err != nil {
		return fabric.DoneReq(c.st.err)
	}
	c.flushTailLocked() // its bytes go ahead of this message's on every link
	if c.st.err != nil {
		return fabric.DoneReq(c.st.err) // the flush found no link left
	}
	m := c.out.add(tag, buf)
	head := c.tailStart(len(buf))
	m.rest = head
	c.splitLocked(m, 0, head, len(buf)) // by the shares of the whole message's size
	if head < len(buf) && c.st.err == nil {
		c.startTailLocked(m)
	}
	if !c.opt.NoAcks {
		// A reader holding back a part until its receive is posted must
		// stage it now instead: the acks of this message may be queued
		// behind it on its link (see place).
		c.cond.Broadcast()
	}
	return m.req
}

// sendRangeLocked sends bytes [off, off+n) of m, split over the live links
// by the planner's shares for messages of n bytes.
func (c *channel) sendRangeLocked(m *outMsg, off, n int) {
	c.splitLocked(m, off, n, n)
}

// splitLocked sends bytes [off, off+n) of m, split over the live links by
// the planner's shares for messages of class bytes.
func (c *channel) splitLocked(m *outMsg, off, n, class int) {
	parts := c.bal.planner.SplitAs(class, n, c.opt.Align)
	if len(parts) == 0 { // the planner has no live link left
		c.failLocked(fmt.Errorf("multilink to rank %d: no link left to send on: %w", c.peer, errs.ErrPeerLost))
		return
	}
	for _, p := range parts {
		c.issueLocked(m, p.Link, off+p.Off, p.Len)
	}
}

// issueLocked sends bytes [off, off+n) of m over link j as one part: a
// frame, and the payload after it when it does not fit in the frame.
func (c *channel) issueLocked(m *outMsg, j, off, n int) {
	h := header{wantAck: !c.opt.NoAcks, seq: m.seq, total: len(m.buf), off: off, len: n, tag: m.tag}
	frame := make([]byte, c.opt.FrameBytes)
	h.put(frame)
	link := c.links[j]
	reqs := make([]fabric.Request, 1, 2)
	if h.len <= c.opt.FrameBytes-headerLen {
		copy(frame[headerLen:], m.buf[h.off:h.off+h.len])
		reqs[0] = link.Send(frameTag(), frame)
	} else {
		reqs[0] = link.Send(frameTag(), frame)
		reqs = append(reqs, link.Send(payloadTag(h), m.buf[h.off:h.off+h.len]))
	}
	pt := &part{link: j, off: h.off, len: h.len}
	m.parts = append(m.parts, pt)
	m.pending++
	go c.awaitPart(m, pt, reqs, c.opt.Now())
}

// awaitPart waits for one part's sends, then records its time, or sends it
// again over the other links when its link failed.
func (c *channel) awaitPart(m *outMsg, p *part, reqs []fabric.Request, issued time.Time) {
	var err error
	for _, r := range reqs {
		<-r.Done()
		if e := r.Err(); e != nil && err == nil {
			err = e
		}
	}
	done := c.opt.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	m.pending--
	if c.st.err != nil {
		if m.pending == 0 { // no link reads buf any more
			c.finishSendLocked(m, c.st.err)
		}
		return
	}
	if err != nil {
		// The first failure of the link resends all its unacknowledged
		// parts, this one included; a part issued on a link that had
		// already failed is resent here.
		m.resent = true
		c.linkDownLocked(p.link, fmt.Errorf("send part [%d,+%d) of message %d: %w", p.off, p.len, m.seq, err))
		if c.st.err != nil {
			if m.pending == 0 {
				c.finishSendLocked(m, c.st.err)
			}
			return
		}
		c.resendPartLocked(m, p)
		c.tailStalledLocked(m)
		c.settleSendLocked(m)
		return
	}
	j := p.link
	m.obs = append(m.obs, balance.Observation{Link: j, Bytes: int64(p.len), Duration: c.out.service(j, issued, done)})
	if c.opt.NoAcks {
		m.ack(p.off, p.len) // the link's Send completes on delivery
	}
	c.pieceLocked(m, j) // the link that finished first takes more of the tail
	c.tailStalledLocked(m)
	if m.pending == 0 && !m.resent && !m.observed {
		m.observed = true
		c.bal.observe(len(m.buf), m.obs)
	}
	c.settleSendLocked(m)
}

// settleSendLocked completes m once the receiver holds all of it and no
// link still reads its buffer.
func (c *channel) settleSendLocked(m *outMsg) {
	if m.pending == 0 && m.whole {
		c.finishSendLocked(m, nil)
	}
}

func (c *channel) finishSendLocked(m *outMsg, err error) {
	if c.out.msgs[m.seq] != m {
		return
	}
	delete(c.out.msgs, m.seq)
	m.req.Complete(err)
}

// ackArrived accounts for an ack frame: the peer holds part h of one of
// our messages. An ack for a message already completed (a part sent twice
// is acknowledged twice) or that does not match one is ignored.
func (c *channel) ackArrived(j int, h header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.out.msgs[h.seq]
	if m == nil || h.total != len(m.buf) {
		return
	}
	if !slices.ContainsFunc(m.parts, func(p *part) bool { return p.off == h.off && p.len == h.len }) {
		// Parts are acknowledged whole: this ack is for bytes never sent.
		c.linkDownLocked(j, fmt.Errorf("ack for part [%d,+%d) of message %d, which was never sent: corrupt stream: %w",
			h.off, h.len, h.seq, errs.ErrPeerLost))
		return
	}
	m.ack(h.off, h.len)
	c.settleSendLocked(m)
}

// resendLinkLocked sends again, over the links still alive, whatever the
// parts sent on failed link j lack of acknowledgements, oldest message
// first.
func (c *channel) resendLinkLocked(j int) {
	for _, seq := range slices.Sorted(maps.Keys(c.out.msgs)) {
		if c.st.err != nil { // no link left to resend on
			return
		}
		m := c.out.msgs[seq]
		for _, p := range m.parts { // the parts issued so far; resends append
			if p.link == j {
				c.resendPartLocked(m, p)
			}
		}
	}
}

// resendPartLocked sends the unacknowledged bytes of part p of m again,
// over the links still alive, and marks p moved (it is resent once: the
// parts that replace it are resent if their own link fails).
func (c *channel) resendPartLocked(m *outMsg, p *part) {
	if p.moved || c.st.err != nil {
		return
	}
	p.moved = true
	if m.whole {
		return
	}
	if len(m.buf) == 0 { // its only part, empty, was not acknowledged
		m.resent = true
		c.sendRangeLocked(m, 0, 0)
		return
	}
	for _, r := range m.acked.missing(p.off, p.len) {
		m.resent = true
		c.sendRangeLocked(m, r[0], r[1]-r[0])
		if c.st.err != nil {
			return
		}
	}
}
