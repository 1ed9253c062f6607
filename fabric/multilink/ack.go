package multilink

import (
	"fmt"
	"maps"
	"slices"

	"flexlink/fabric"
	"flexlink/internal/errs"
)

// Acknowledgements (see the package documentation): the receiver answers
// every part frame that asks for it with an ack frame naming the part, on
// the link the part came over; the sender keeps every part it issued until
// the acks cover the message, and resends what a failed link carried that
// is not acknowledged.

// sendAckLocked acknowledges part h, which arrived over link j. The ack
// goes back over j, so that losing it means losing j, which makes the
// sender resend the part anyway; when j has failed here already, any live
// link carries it.
func (c *channel) sendAckLocked(j int, h header) {
	if !h.wantAck || c.err != nil {
		return
	}
	if c.dead[j] {
		j = slices.Index(c.dead, false)
		if j < 0 {
			return
		}
	}
	frame := make([]byte, c.opt.FrameBytes)
	ackOf(h).put(frame)
	go c.awaitAck(j, h, c.links[j].Send(frameTag(), frame))
}

// awaitAck waits for the send of the ack of part h over link j. When it
// fails the link is dead, and the ack is sent again over another.
func (c *channel) awaitAck(j int, h header, r fabric.Request) {
	<-r.Done()
	err := r.Err()
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.linkDownLocked(j, fmt.Errorf("acknowledge part [%d,+%d) of message %d: %w", h.off, h.len, h.seq, err))
	c.sendAckLocked(j, h)
}

// ackArrived accounts for an ack frame: the peer holds part h of one of
// our messages. An ack for a message already completed (a part sent twice
// is acknowledged twice) or that does not match one is ignored.
func (c *channel) ackArrived(j int, h header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.sending[h.seq]
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
	for _, seq := range slices.Sorted(maps.Keys(c.sending)) {
		if c.err != nil { // no link left to resend on
			return
		}
		m := c.sending[seq]
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
	if p.moved || c.err != nil {
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
		if c.err != nil {
			return
		}
	}
}
