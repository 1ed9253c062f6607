package tcp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// recvConn is the receiving side: a reader goroutine per socket, and an
// ack writer on socket 0.
//
// Matching: the IRecvs cover consecutive message numbers (an IRecv of n
// buffers takes the next n). A reader that reads a frame of message s
// waits until an IRecv covers s, picks the buffer by tag on the message's
// first frame, checks the length, and reads the frame's bytes straight
// into that buffer. A message that does not fit is drained (read and
// dropped, never stored) and acknowledged, then the connection fails.
type recvConn struct {
	endpoint
	st state
	lifecycle

	mu     sync.Mutex
	cond   *sync.Cond // an IRecv was posted, or the connection failed
	posted postings   // the IRecvs and the messages they cover
	done   completions
	poison poison
	wmu    chan struct{} // holds a token while socket 0's reverse direction is written
	// waitingW, if set (tests), is called when lockWithin finds the
	// reverse direction busy and starts to wait for it.
	waitingW func()
}

// lastAckWait bounds how long a failing receiver waits for the ack
// writer's frame in progress before it sends its own last ack: one small
// frame, late only when the peer has stopped reading.
const lastAckWait = 500 * time.Millisecond

// lockW takes the reverse direction.
func (c *recvConn) lockW() { c.wmu <- struct{}{} }

// lockWithin takes the reverse direction unless bound passes first, and
// reports whether it did.
func (c *recvConn) lockWithin(bound time.Duration) bool {
	select {
	case c.wmu <- struct{}{}:
		return true
	default:
	}
	if c.waitingW != nil {
		c.waitingW()
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case c.wmu <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (c *recvConn) unlockW() { <-c.wmu }

// postings are the posted receives and the messages being read into them
// (c.mu held).
type postings struct {
	next uint64            // first message no IRecv covers yet
	ops  []*recvOp         // posted, unfinished, in order
	msgs map[uint64]*inMsg // messages partly received
}

// remove forgets op: it completed or failed.
func (p *postings) remove(op *recvOp) {
	p.ops = slices.DeleteFunc(p.ops, func(o *recvOp) bool { return o == op })
}

// completions counts the complete messages, which the ack writer reports
// to the sender (c.mu held, but kick).
type completions struct {
	arrived map[uint64]bool // complete messages at or past acked
	acked   uint64          // messages below it are all complete
	kick    chan struct{}   // capacity 1: acked or the poison changed
}

// seen reports whether message seq is complete already.
func (d *completions) seen(seq uint64) bool { return d.arrived[seq] || seq < d.acked }

// complete records that message seq is complete.
func (d *completions) complete(seq uint64) {
	d.arrived[seq] = true
	for d.arrived[d.acked] {
		delete(d.arrived, d.acked)
		d.acked++
	}
	d.signal()
}

// signal wakes the ack writer.
func (d *completions) signal() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// poison is a mismatch (c.mu held): no further IRecv, and the connection
// fails with err once message seq, which is drained, is acknowledged.
type poison struct {
	err error
	seq uint64
}

type recvOp struct {
	base    uint64
	bufs    [][]byte
	tags    []uint64
	sizes   []int
	claimed []bool
	left    int   // messages not yet complete
	active  int   // frames being read into the buffers now
	err     error // failed; completes when active drops to 0
	req     *request
}

type inMsg struct {
	op         *recvOp // nil: drained
	idx        int
	tag, total uint64
	got        uint64
}

func newRecvConn(p *Provider, dev, remote string, socks []*net.TCPConn) *recvConn {
	c := &recvConn{endpoint: newEndpoint(p, dev, remote, socks), st: newState(),
		posted: postings{msgs: map[uint64]*inMsg{}}, wmu: make(chan struct{}, 1),
		done: completions{arrived: map[uint64]bool{}, kick: make(chan struct{}, 1)}}
	c.cond = sync.NewCond(&c.mu)
	c.start(len(socks)+1, c.fail, func() { p.untrack(c) })
	for i := range socks {
		go c.read(i)
	}
	go c.writeAcks()
	return c
}

// IRecv posts up to MaxRecvs buffers for the next len(bufs) messages.
func (c *recvConn) IRecv(bufs [][]byte, tags []uint64, mrs []fnet.MemRegion) (fnet.Request, error) {
	n := len(bufs)
	switch {
	case n < 1 || n > fnet.MaxRecvs:
		return nil, connErr(c.dev, c.remote, "recv", fmt.Errorf("%d buffers in one receive, want 1..%d", n, fnet.MaxRecvs))
	case len(tags) != n || (mrs != nil && len(mrs) != n):
		return nil, connErr(c.dev, c.remote, "recv", fmt.Errorf("%d buffers with %d tags and %d regions", n, len(tags), len(mrs)))
	}
	for i := range tags {
		if slices.Contains(tags[:i], tags[i]) {
			return nil, connErr(c.dev, c.remote, "recv", fmt.Errorf("tag %#x given twice in one receive", tags[i]))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.st.failure(); err != nil {
		return failedRequest(err), nil
	}
	if c.poison.err != nil {
		return failedRequest(c.poison.err), nil
	}
	op := &recvOp{base: c.posted.next, bufs: slices.Clone(bufs), tags: slices.Clone(tags), sizes: make([]int, n),
		claimed: make([]bool, n), left: n, req: newRequest()}
	c.posted.next += uint64(n)
	c.posted.ops = append(c.posted.ops, op)
	c.cond.Broadcast()
	return op.req, nil
}

// read is socket i's loop.
func (c *recvConn) read(i int) {
	defer c.wg.Done()
	br := bufio.NewReaderSize(&deadlineReader{c: c.socks[i], timeout: c.timeout}, 16<<10)
	var b [hdrBytes]byte
	for {
		if _, err := io.ReadFull(br, b[:]); err != nil {
			c.fail(peerLost(i, err, c.timeout), false)
			return
		}
		h, err := parseHeader(b[:], true)
		if err != nil {
			c.fail(fmt.Errorf("socket %d: corrupt stream: %v: %w", i, err, errs.ErrPeerLost), false)
			return
		}
		switch h.kind {
		case kindBeat:
			continue
		case kindAbort:
			reason := make([]byte, h.length) // ≤ maxReason
			io.ReadFull(br, reason)
			c.fail(peerAborted(string(reason)), false)
			return
		}
		m, dst, counted, err := c.claim(h)
		if err != nil {
			c.fail(err, false)
			return
		}
		if counted {
			_, err = io.ReadFull(br, dst)
		} else {
			_, err = br.Discard(int(h.length))
		}
		if err != nil {
			err = peerLost(i, err, c.timeout)
		}
		if err = c.landed(h, m, counted, err); err != nil {
			c.fail(err, false)
			return
		}
	}
}

// claim waits until an IRecv covers h's message and returns where the
// frame's bytes go; counted is false when they are to be drained.
func (c *recvConn) claim(h header) (m *inMsg, dst []byte, counted bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h.seq >= c.posted.next {
		if err := c.st.failure(); err != nil {
			return nil, nil, false, err
		}
		c.cond.Wait()
	}
	if err := c.st.failure(); err != nil {
		return nil, nil, false, err
	}
	m = c.posted.msgs[h.seq]
	if m == nil {
		if c.done.seen(h.seq) {
			return nil, nil, false, fmt.Errorf("message %d arrives twice: %w", h.seq, errs.ErrPeerLost)
		}
		m = &inMsg{tag: h.tag, total: h.total}
		c.posted.msgs[h.seq] = m
		if err := c.match(h, m); err != nil {
			// Drain the message, acknowledge it, then end the connection.
			c.poison = poison{err: connErr(c.dev, c.remote, "recv", err), seq: h.seq}
			if m.op != nil {
				c.failOp(m.op, c.poison.err)
			}
			m.op = nil
		}
	} else if m.tag != h.tag || m.total != h.total {
		return nil, nil, false, fmt.Errorf("message %d: frames disagree on tag or length: %w", h.seq, errs.ErrPeerLost)
	}
	if m.op == nil || m.op.err != nil {
		return m, nil, false, nil
	}
	m.op.active++
	return m, m.op.bufs[m.idx][h.off : h.off+h.length], true, nil
}

// match finds message h's receive and buffer (c.mu held).
func (c *recvConn) match(h header, m *inMsg) error {
	var op *recvOp
	for _, o := range c.posted.ops {
		if h.seq >= o.base && h.seq < o.base+uint64(len(o.bufs)) {
			op = o
		}
	}
	if op == nil {
		return nil // its receive already failed: drain
	}
	m.op = op
	i := slices.Index(op.tags, h.tag)
	switch {
	case i < 0:
		return fmt.Errorf("message %d has tag %#x, not among the receive's tags %#x: %w", h.seq, h.tag, op.tags, errs.ErrMismatch)
	case op.claimed[i]:
		return fmt.Errorf("message %d has tag %#x, which an earlier message of this receive took: %w", h.seq, h.tag, errs.ErrMismatch)
	case h.total > uint64(len(op.bufs[i])):
		return fmt.Errorf("message %d (tag %#x) has %d bytes, its buffer %d: %w", h.seq, h.tag, h.total, len(op.bufs[i]), errs.ErrMismatch)
	}
	op.claimed[i] = true
	m.idx = i
	return nil
}

// landed accounts n bytes of a frame read (or failed with ioErr).
func (c *recvConn) landed(h header, m *inMsg, counted bool, ioErr error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	op := m.op
	if counted {
		op.active--
		if op.err != nil && op.active == 0 {
			op.req.complete(nil, op.err)
		}
	}
	if ioErr != nil {
		return ioErr
	}
	m.got += h.length
	switch {
	case m.got > m.total:
		return fmt.Errorf("message %d: frames carry %d bytes of %d: %w", h.seq, m.got, m.total, errs.ErrPeerLost)
	case m.got < m.total:
		return nil
	}
	delete(c.posted.msgs, h.seq)
	c.done.complete(h.seq)
	if op == nil || op.err != nil {
		return nil
	}
	op.sizes[m.idx] = int(m.total)
	if op.left--; op.left == 0 {
		c.posted.remove(op)
		op.req.complete(op.sizes, nil)
	}
	return nil
}

// failOp fails op now, or when its last active frame is read (c.mu held).
func (c *recvConn) failOp(op *recvOp, err error) {
	if op.err == nil {
		op.err = err
	}
	c.posted.remove(op)
	if op.active == 0 {
		op.req.complete(nil, op.err)
	}
}

// writeAcks sends the count of complete messages back on socket 0 when it
// grows, and a heartbeat when idle.
func (c *recvConn) writeAcks() {
	defer c.wg.Done()
	beat := max(c.timeout/5, time.Millisecond)
	tick := time.NewTicker(beat)
	defer tick.Stop()
	sent := uint64(0)
	var thenAt time.Time // when then was first seen
	var b [hdrBytes]byte
	for {
		select {
		case <-c.done.kick:
		case <-tick.C:
		case <-c.st.dead:
			return
		}
		c.mu.Lock()
		acked, then, thenSeq := c.done.acked, c.poison.err, c.poison.seq
		c.mu.Unlock()
		if then != nil && thenAt.IsZero() {
			thenAt = time.Now()
		}
		h := header{kind: kindBeat}
		if acked != sent {
			h = header{kind: kindAck, seq: acked}
		}
		h.put(b[:])
		c.lockW()
		c.socks[0].SetWriteDeadline(time.Now().Add(c.timeout))
		_, err := c.socks[0].Write(b[:])
		c.unlockW()
		if err != nil {
			c.fail(peerLost(0, err, c.timeout), false)
			return
		}
		sent = acked
		// The ack of the drained message is out (or earlier messages have
		// not arrived within the timeout): end the connection.
		if then != nil && (acked > thenSeq || time.Since(thenAt) > c.timeout) {
			c.fail(then, true)
			return
		}
	}
}

// fail ends the connection with err (the first failure wins). Receives
// whose buffers no reader is filling fail at once, the others when their
// reader stops. With tell, an abort frame goes to the peer first.
func (c *recvConn) fail(err error, tell bool) {
	err = connErr(c.dev, c.remote, "recv", err)
	if !c.st.set(err) {
		return
	}
	c.mu.Lock()
	for _, op := range slices.Clone(c.posted.ops) {
		c.failOp(op, err)
	}
	c.cond.Broadcast()
	acked := c.done.acked
	c.mu.Unlock()
	if tell && c.lockWithin(min(lastAckWait, c.timeout)) {
		// Acknowledge what has landed before the abort, so a sender whose
		// message arrived completely sees it delivered (a receiver that
		// closes right after its last receive must not fail that send).
		// The ack writer may be in the middle of a frame (a heartbeat
		// read before the last message landed): wait for it, bounded, as
		// closing the socket under it would lose that ack.
		var b [hdrBytes]byte
		ack := header{kind: kindAck, seq: acked}
		ack.put(b[:])
		c.socks[0].SetWriteDeadline(time.Now().Add(c.timeout))
		c.socks[0].Write(b[:])
		writeAbort(c.socks[0], err.Error())
		c.unlockW()
	}
	for _, s := range c.socks {
		s.Close()
	}
}
