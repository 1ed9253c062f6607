package multilink

import (
	"fmt"
	"slices"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// inMsg is one incoming message: posted by Recv, or announced by a frame
// that arrived first, or both.
type inMsg struct {
	seq uint64
	posting
	announced
	landing
}

// posting is what Recv posted for a message, and how the receive ended.
type posting struct {
	posted bool
	tag    fabric.Tag
	buf    []byte
	req    *fabric.Req
	done   bool // req completed (with success or an error)
	failed bool // tag or size mismatch: parts are drained, not stored
}

// announced is what the first frame of a message said of it.
type announced struct {
	seen  bool // a frame arrived: total and sent are known
	total int
	sent  fabric.Tag // the sender's tag
}

// landing is where a message's parts are: the bytes in buf, the parts
// being written into it, and those waiting to be copied in.
type landing struct {
	got ranges // bytes in buf
	// writing holds the range of every part being received straight into
	// buf. The receive completes only when none is (a duplicate part must
	// not land in a buffer the caller already has back), and no other bytes
	// go to a range while a link owns it: a part sent again after a link
	// failure may arrive on another link while the first copy is still
	// being written. Such a part is staged, and held until the range is
	// free.
	writing [][2]int
	staged  []stagedPart // arrived before Recv was posted
	held    []stagedPart // arrived after, over a range in writing
}

// inbox is the receiver's state (c.mu held).
type inbox struct {
	next uint64            // number of the next Recv
	msgs map[uint64]*inMsg // posted but not done, or not yet posted
}

// get returns message seq, made when no frame or Recv named it yet.
func (b *inbox) get(seq uint64) *inMsg {
	m := b.msgs[seq]
	if m == nil {
		m = &inMsg{seq: seq}
		b.msgs[seq] = m
	}
	return m
}

// earlierDone reports whether every receive before seq has completed for
// the caller.
func (b *inbox) earlierDone(seq uint64) bool {
	for s, m := range b.msgs {
		if s < seq && !m.done {
			return false
		}
	}
	return true
}

type stagedPart struct {
	h    header
	data []byte
}

// Recv posts a receive; parts already staged for it are copied in now.
func (c *channel) Recv(tag fabric.Tag, buf []byte) fabric.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.err != nil {
		return fabric.DoneReq(c.st.err)
	}
	m := c.in.get(c.in.next)
	c.in.next++
	m.posted, m.tag, m.buf, m.req = true, tag, buf, fabric.NewReq()
	staged := m.staged
	m.staged = nil
	if m.seen {
		c.checkLocked(m)
	}
	for _, s := range staged {
		if s.h.total != m.total {
			continue // not this message's size: a broken sender; ignore it
		}
		if !m.failed && !m.done {
			copy(m.buf[s.h.off:], s.data)
		}
		m.got = m.got.add(s.h.off, s.h.len)
	}
	c.settleLocked(m)
	c.cond.Broadcast()
	return m.req
}

// busy reports whether a part being received straight into buf overlaps
// [off, off+n).
func (m *landing) busy(off, n int) bool {
	for _, w := range m.writing {
		if off < w[1] && w[0] < off+n {
			return true
		}
	}
	return false
}

// written removes the range of a part received straight into buf (or
// given up) from writing.
func (m *landing) written(off, n int) {
	if i := slices.Index(m.writing, [2]int{off, off + n}); i >= 0 {
		m.writing = slices.Delete(m.writing, i, i+1)
	}
}

// checkLocked compares the first frame of a posted message with the
// receive: a different tag or length fails the receive at once, and the
// message's parts are drained so that the sender completes normally and
// the links stay in step.
func (c *channel) checkLocked(m *inMsg) {
	switch {
	case m.failed || m.done:
	case m.tag != m.sent:
		m.failed, m.done = true, true
		m.req.Complete(&fabric.TagMismatchError{Peer: c.peer, Want: m.tag, Got: m.sent})
	case m.total != len(m.buf):
		m.failed, m.done = true, true
		m.req.Complete(fmt.Errorf("multilink from rank %d: message %d has %d bytes, receive posted for %d: %w",
			c.peer, m.seq, m.total, len(m.buf), errs.ErrMismatch))
	}
}

// settleLocked copies in the held parts whose ranges are free, completes a
// message whose bytes have all arrived, and forgets it once nothing more
// can arrive for it.
func (c *channel) settleLocked(m *inMsg) {
	if c.st.err != nil && m.posted && !m.done {
		// The channel failed: complete the receive once no link writes
		// into buf any more.
		if len(m.writing) == 0 {
			m.done = true
			m.req.Complete(c.st.err)
		}
		return
	}
	kept := m.held[:0]
	for _, s := range m.held {
		if m.busy(s.h.off, s.h.len) {
			kept = append(kept, s)
			continue
		}
		if !m.failed && !m.done {
			copy(m.buf[s.h.off:], s.data)
		}
		m.got = m.got.add(s.h.off, s.h.len)
	}
	clear(m.held[len(kept):])
	m.held = kept
	if !m.seen || !m.posted || len(m.writing) > 0 || m.got.bytes() < m.total {
		return
	}
	if !m.done {
		m.done = true
		m.req.Complete(nil)
	}
	delete(c.in.msgs, m.seq)
}
