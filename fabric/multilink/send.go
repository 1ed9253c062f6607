package multilink

import (
	"fmt"
	"time"

	"flexlink/fabric"
	"flexlink/fabric/balance"
	"flexlink/internal/errs"
)

// outMsg is one Send in flight.
type outMsg struct {
	seq     uint64
	tag     fabric.Tag
	buf     []byte
	req     *fabric.Req
	pending int                   // parts not yet completed
	resent  bool                  // a part failed: the timings are not clean
	obs     []balance.Observation // per completed part
}

// Send splits buf by the planner's shares and sends the parts at once.
// Parts are issued in Send order on every link while c.mu is held, and
// numbered, so the receiver can put them back in order.
func (c *channel) Send(tag fabric.Tag, buf []byte) fabric.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return fabric.DoneReq(c.err)
	}
	m := &outMsg{seq: c.sendSeq, tag: tag, buf: buf, req: fabric.NewReq()}
	c.sendSeq++
	c.sending[m] = struct{}{}
	c.sendRangeLocked(m, 0, len(buf))
	return m.req
}

// sendRangeLocked sends bytes [off, off+n) of m, split over the live links.
func (c *channel) sendRangeLocked(m *outMsg, off, n int) {
	parts := c.planner.Split(n, c.opt.Align)
	if len(parts) == 0 { // the planner has no live link left
		c.failLocked(fmt.Errorf("multilink to rank %d: no link left to send on: %w", c.peer, errs.ErrPeerLost))
		return
	}
	for _, p := range parts {
		h := header{seq: m.seq, total: len(m.buf), off: off + p.Off, len: p.Len, tag: m.tag}
		frame := make([]byte, c.opt.FrameBytes)
		h.put(frame)
		link := c.links[p.Link]
		reqs := make([]fabric.Request, 1, 2)
		if h.len <= c.opt.FrameBytes-headerLen {
			copy(frame[headerLen:], m.buf[h.off:h.off+h.len])
			reqs[0] = link.Send(frameTag(), frame)
		} else {
			reqs[0] = link.Send(frameTag(), frame)
			reqs = append(reqs, link.Send(payloadTag(h), m.buf[h.off:h.off+h.len]))
		}
		m.pending++
		go c.awaitPart(m, p.Link, h, reqs, c.opt.Now())
	}
}

// awaitPart waits for one part's sends, then records its time, or sends it
// again over the other links when its link failed.
func (c *channel) awaitPart(m *outMsg, j int, h header, reqs []fabric.Request, issued time.Time) {
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
	if c.err != nil {
		c.finishSendLocked(m, c.err)
		return
	}
	if err != nil {
		m.resent = true
		c.linkDownLocked(j, fmt.Errorf("send part [%d,+%d) of message %d: %w", h.off, h.len, h.seq, err))
		if c.err != nil {
			c.finishSendLocked(m, c.err)
			return
		}
		c.sendRangeLocked(m, h.off, h.len)
		return
	}
	// The part's service time starts when it was issued or, when an earlier
	// part still occupied the link, when that one completed.
	start := issued
	if c.linkFree[j].After(start) {
		start = c.linkFree[j]
	}
	c.linkFree[j] = done
	m.obs = append(m.obs, balance.Observation{Link: j, Bytes: int64(h.len), Duration: done.Sub(start)})
	if m.pending == 0 {
		if !m.resent {
			c.planner.Observe(len(m.buf), m.obs)
		}
		c.finishSendLocked(m, nil)
	}
}

func (c *channel) finishSendLocked(m *outMsg, err error) {
	if _, ok := c.sending[m]; !ok {
		return
	}
	delete(c.sending, m)
	m.req.Complete(err)
}
