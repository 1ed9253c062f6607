package multilink

import (
	"fmt"

	"github.com/flexlink/flexlink/fabric"
)

// Where a part's bytes go.
const (
	direct  = iota // into the posted receive's buffer
	stage          // into a buffer of its own until the receive is posted
	discard        // nowhere: the message failed or was already complete
)

type placement struct {
	m    *inMsg // nil for a part of a message already forgotten
	kind int
}

// reader is link j's reading goroutine: it keeps a frame receive posted,
// places each part it announces, receives the payload, and accounts for
// it (which acknowledges it, see ack.go); ack frames it hands to the
// sending side.
type reader struct {
	c *channel
	j int
}

// run reads until the link fails or the channel does.
func (r *reader) run() {
	c, j := r.c, r.j
	link := c.links[j]
	inline := c.opt.FrameBytes - headerLen
	// Two frame buffers: the next frame is posted before the current
	// part's payload is waited for, so the link never idles between parts.
	frames := [2][]byte{make([]byte, c.opt.FrameBytes), make([]byte, c.opt.FrameBytes)}
	k := 0
	next := link.Recv(frameTag(), frames[k])
	for {
		<-next.Done()
		if err := next.Err(); err != nil {
			r.failed(placement{}, header{}, err)
			return
		}
		h, err := parseHeader(frames[k])
		if err != nil {
			err = fmt.Errorf("multilink from rank %d: link %d: %w", c.peer, j, err)
			link.Abort(err) // out of step: the peer must stop using it too
			r.failed(placement{}, header{}, err)
			return
		}
		if h.kind == kindAck {
			c.ackArrived(j, h)
			next = link.Recv(frameTag(), frames[k]) // the ack is parsed: reuse its buffer
			continue
		}
		dst, pl, ok := r.place(h)
		if !ok {
			return // the channel failed
		}
		var payload fabric.Request
		if h.len <= inline {
			copy(dst, frames[k][headerLen:headerLen+h.len])
		} else {
			payload = link.Recv(payloadTag(h), dst)
		}
		k ^= 1
		next = link.Recv(frameTag(), frames[k])
		if payload != nil {
			<-payload.Done()
			if err := payload.Err(); err != nil {
				r.failed(pl, h, fmt.Errorf("receive part [%d,+%d) of message %d: %w", h.off, h.len, h.seq, err))
				return
			}
		}
		r.arrived(pl, h, dst)
	}
}

// place decides where the part h goes. A part of the next message to be
// received, when every earlier receive has completed, waits for the
// caller's Recv (backpressure); other early parts are staged. So are all
// early parts while a Send of this side awaits acknowledgements: its acks
// may be queued behind the part on this link, and the caller may be
// waiting for that Send before it posts the Recv. It returns false when
// the channel failed.
func (r *reader) place(h header) ([]byte, placement, bool) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.st.err != nil {
			return nil, placement{}, false
		}
		m := c.in.msgs[h.seq]
		if m == nil && h.seq < c.in.next {
			return make([]byte, h.len), placement{kind: discard}, true
		}
		if m != nil && m.posted {
			if !m.seen {
				m.seen, m.total, m.sent = true, h.total, h.tag
				c.checkLocked(m)
			}
			switch {
			case h.total != m.total: // a broken sender: drop the part
				return make([]byte, h.len), placement{kind: discard}, true
			case m.failed: // drained, and counted so the message is forgotten
				return make([]byte, h.len), placement{m: m, kind: discard}, true
			}
			if m.busy(h.off, h.len) { // a copy of it is still being written
				return make([]byte, h.len), placement{m: m, kind: stage}, true
			}
			m.writing = append(m.writing, [2]int{h.off, h.off + h.len})
			return m.buf[h.off : h.off+h.len], placement{m: m, kind: direct}, true
		}
		if h.seq == c.in.next && c.in.earlierDone(h.seq) && (c.opt.NoAcks || len(c.out.msgs) == 0) {
			c.cond.Wait()
			continue
		}
		m = c.in.get(h.seq)
		if !m.seen {
			m.seen, m.total, m.sent = true, h.total, h.tag
		}
		return make([]byte, h.len), placement{m: m, kind: stage}, true
	}
}

// arrived accounts for a part whose bytes are in place, having come over
// the reader's link, and acknowledges it: it is held here, or not needed
// (a duplicate or a message that failed), and the sender may stop keeping
// it.
func (r *reader) arrived(pl placement, h header, data []byte) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	r.sendAckLocked(r.j, h)
	m := pl.m
	if m == nil {
		return
	}
	switch pl.kind {
	case direct:
		m.written(h.off, h.len)
	case stage:
		if !m.posted {
			m.staged = append(m.staged, stagedPart{h: h, data: data})
			return
		}
		if h.total != m.total || m.done {
			return // done: every byte is in place and the caller owns buf again
		}
		if !m.failed { // posted while the part was in flight
			if m.busy(h.off, h.len) {
				m.held = append(m.held, stagedPart{h: h, data: data})
				return
			}
			copy(m.buf[h.off:], data)
		}
	}
	m.got = m.got.add(h.off, h.len)
	c.settleLocked(m)
}

// failed handles the failure of the reader's link: part h, when it was
// being received straight into a buffer, is given up (the sender sends it
// again), and the link is marked dead.
func (r *reader) failed(pl placement, h header, err error) {
	c, j := r.c, r.j
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl.kind == direct && pl.m != nil {
		pl.m.written(h.off, h.len)
		c.settleLocked(pl.m)
	}
	if c.st.err == nil {
		c.linkDownLocked(j, err)
	}
}
