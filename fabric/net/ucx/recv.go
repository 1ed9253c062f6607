package ucx

import (
	"bufio"
	"fmt"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/ucx/internal/ucp"
	"github.com/flexlink/flexlink/internal/errs"
)

// recvConn is the receiving side. It owns no UCP endpoint: receives are
// posted on the worker and matched by the connection id in the tag.
type recvConn struct {
	p      *Provider
	dev    string
	remote string
	ctl    control
	id     uint32

	// Owned by the engine loop.
	seqs    recvSeqs
	pending map[*recvReq]struct{}
	err     error
	closing error       // the sender closed: no message beyond those matched comes
	wired   ucp.Request // the handshake message's receive, until it lands
}

// recvSeqs numbers the received messages of a connection (on the loop):
// each IRecv takes the next numbers, and at most seqWindow may be
// outstanding, since the wire tag carries the number modulo seqWindow.
type recvSeqs struct {
	next   uint64          // sequence number of the next message to assign
	oldest uint64          // no message before it is outstanding
	out    map[uint64]bool // outstanding message sequence numbers
}

// take assigns n numbers and returns the first, or false when that would
// leave more than seqWindow outstanding.
func (s *recvSeqs) take(n uint64) (uint64, bool) {
	for s.oldest < s.next && !s.out[s.oldest] {
		s.oldest++
	}
	if s.next+n-s.oldest > seqWindow {
		return 0, false
	}
	first := s.next
	s.next += n
	for k := uint64(0); k < n; k++ {
		s.out[first+k] = true
	}
	return first, true
}

// landed records that message seq is no longer outstanding.
func (s *recvSeqs) landed(seq uint64) { delete(s.out, seq) }

// recvReq is one IRecv of n buffers: messages first..first+n-1.
type recvReq struct {
	req   *request
	c     *recvConn
	bufs  [][]byte
	tags  []uint64
	memh  []ucp.Memh
	first uint64
	sizes []int
	left  int         // messages not landed yet
	found []bool      // multi-receive: message k probed
	used  []bool      // multi-receive: buffer j taken
	post1 ucp.Request // one-buffer receive in flight (to cancel), or 0
}

func (c *recvConn) errorf(sentinel error, format string, args ...any) error {
	return &fnet.ConnError{Provider: "ucx", Device: c.dev, Remote: c.remote, Op: "recv",
		Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)}
}

// IRecv posts a (multi-)receive; see fnet.RecvConn for the matching rules.
func (c *recvConn) IRecv(bufs [][]byte, tags []uint64, mrs []fnet.MemRegion) (fnet.Request, error) {
	n := len(bufs)
	if n < 1 || n > fnet.MaxRecvs || len(tags) != n || (mrs != nil && len(mrs) != n) {
		return nil, c.errorf(errs.ErrMismatch, "irecv with %d buffers, %d tags, %d regions (1..%d buffers, one tag each)", n, len(tags), len(mrs), fnet.MaxRecvs)
	}
	rr := &recvReq{req: newRequest(), c: c, bufs: bufs, tags: tags, memh: make([]ucp.Memh, n), sizes: make([]int, n), left: n}
	for i, t := range tags {
		if t > MaxUserTag {
			return nil, c.errorf(errs.ErrNotSupported, "tag %#x over the %d bits the ucx provider leaves to users (max %#x)", t, UserTagBits, MaxUserTag)
		}
		for _, u := range tags[:i] {
			if u == t {
				return nil, c.errorf(errs.ErrMismatch, "tag %d twice in one irecv", t)
			}
		}
		if mrs != nil {
			rr.memh[i] = memhFor(mrs[i], bufs[i])
		}
	}
	if !c.p.e.do(func() { c.post(rr) }) {
		return failed(c.errorf(errs.ErrClosed, "provider closed")), nil
	}
	return rr.req, nil
}

// post runs on the loop.
func (c *recvConn) post(rr *recvReq) {
	if err := c.cause(); err != nil {
		rr.req.finish(nil, err)
		return
	}
	n := uint64(len(rr.bufs))
	first, ok := c.seqs.take(n)
	if !ok {
		rr.req.finish(nil, c.errorf(errs.ErrNotSupported, "more than %d received messages outstanding on one connection", seqWindow))
		return
	}
	rr.first = first
	c.pending[rr] = struct{}{}
	e := c.p.e
	if n > 1 {
		rr.found, rr.used = make([]bool, n), make([]bool, n)
		e.probers = append(e.probers, rr)
		return
	}
	buf := rr.bufs[0]
	ur, info, err := c.p.lib.TagRecv(e.w, addr(buf), len(buf), wireTag(c.id, rr.first, 0), matchMask, rr.memh[0])
	if err != nil {
		c.fail(c.errorf(errs.ErrPeerLost, "post: %v", err))
		return
	}
	if ur == 0 {
		rr.landed(0, 0, ucp.StatusOK, info)
		return
	}
	rr.post1 = ur
	e.track(&pending{r: ur, recv: true, keep: buf, done: func(st ucp.Status, info ucp.RecvInfo) {
		rr.post1 = 0
		rr.landed(0, 0, st, info)
	}})
}

// landed records message k of the request in buffer j (on the loop).
func (rr *recvReq) landed(k, j int, st ucp.Status, info ucp.RecvInfo) {
	c := rr.c
	c.seqs.landed(rr.first + uint64(k))
	if _, ok := c.pending[rr]; !ok {
		return // already failed
	}
	switch st {
	case ucp.StatusOK:
	case ucp.StatusErrMessageTruncated:
		c.fail(c.errorf(errs.ErrMismatch, "message %d is longer than its %d-byte buffer", rr.first+uint64(k), len(rr.bufs[j])))
		return
	case ucp.StatusErrCanceled:
		delete(c.pending, rr)
		rr.req.finish(nil, c.cause())
		return
	default:
		c.fail(c.errorf(errs.ErrPeerLost, "%v", c.p.lib.Err("receive", st)))
		return
	}
	if user := info.SenderTag & MaxUserTag; user != rr.tags[j] {
		c.fail(c.errorf(errs.ErrMismatch, "message %d has tag %d, not among the receive's tags %v", rr.first+uint64(k), user, rr.tags))
		return
	}
	rr.sizes[j] = info.Length
	if rr.left--; rr.left == 0 {
		delete(c.pending, rr)
		rr.req.finish(rr.sizes, nil)
	}
}

// probe (on the loop) looks for the messages of every multi-receive and
// receives each into the buffer of its tag. It returns how many it found.
func (e *engine) probe() uint32 {
	var n uint32
	live := e.probers[:0]
	for _, rr := range e.probers {
		c := rr.c
		if _, ok := c.pending[rr]; !ok {
			continue // failed
		}
		left := 0
		for k := range rr.found {
			if c.err != nil {
				break
			}
			if rr.found[k] {
				continue
			}
			m, info := c.p.lib.TagProbe(e.w, wireTag(c.id, rr.first+uint64(k), 0), matchMask)
			if m == 0 {
				left++
				continue
			}
			rr.found[k] = true
			n++
			rr.take(k, m, info)
		}
		if left > 0 && c.err == nil {
			live = append(live, rr)
		}
	}
	for i := len(live); i < len(e.probers); i++ {
		e.probers[i] = nil
	}
	e.probers = live
	return n
}

// take receives probed message k into the buffer whose tag it carries.
func (rr *recvReq) take(k int, m ucp.Message, info ucp.RecvInfo) {
	c, e := rr.c, rr.c.p.e
	user := info.SenderTag & MaxUserTag
	j := -1
	for i, t := range rr.tags {
		if t == user && !rr.used[i] {
			j = i
		}
	}
	if j < 0 || info.Length > len(rr.bufs[j]) {
		// Receive it somewhere (a probed message must be received), then
		// fail: the connection is unusable.
		scratch := make([]byte, info.Length)
		if ur, err := c.p.lib.TagMsgRecv(e.w, addr(scratch), len(scratch), m, 0); err == nil && ur != 0 {
			e.track(&pending{r: ur, keep: scratch, done: func(ucp.Status, ucp.RecvInfo) {}})
		}
		if j < 0 {
			c.fail(c.errorf(errs.ErrMismatch, "message %d has tag %d, not among the receive's tags %v", rr.first+uint64(k), user, rr.tags))
		} else {
			c.fail(c.errorf(errs.ErrMismatch, "message %d of %d bytes is longer than its %d-byte buffer", rr.first+uint64(k), info.Length, len(rr.bufs[j])))
		}
		return
	}
	rr.used[j] = true
	buf := rr.bufs[j]
	ur, err := c.p.lib.TagMsgRecv(e.w, addr(buf), len(buf), m, rr.memh[j])
	if err != nil {
		c.fail(c.errorf(errs.ErrPeerLost, "receive: %v", err))
		return
	}
	if ur == 0 {
		rr.landed(k, j, ucp.StatusOK, info)
		return
	}
	e.track(&pending{r: ur, keep: buf, done: func(st ucp.Status, _ ucp.RecvInfo) { rr.landed(k, j, st, info) }})
}

// fail (on the loop) fails every pending receive with err and cancels the
// posted ones UCX has not matched yet.
func (c *recvConn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	for rr := range c.pending {
		rr.req.finish(nil, c.err)
		if rr.post1 != 0 {
			c.p.lib.Cancel(c.p.e.w, rr.post1)
		}
		delete(c.pending, rr)
	}
	if c.wired != 0 {
		c.p.lib.Cancel(c.p.e.w, c.wired)
	}
	delete(c.p.recvs, c)
}

func (c *recvConn) cause() error {
	if c.err != nil {
		return c.err
	}
	return c.closing
}

// watch reads the control channel until it ends. An abort or a lost
// connection fails everything; a close is graceful (peerClosed).
func (c *recvConn) watch(r *bufio.Reader) {
	err, graceful := watchCtrl(r, func(e error, why string) error { return c.errorf(e, "%s", why) })
	e := c.p.e
	if !graceful {
		e.do(func() { c.fail(err) })
		return
	}
	e.do(func() { c.peerClosed(err) })
	time.AfterFunc(closeGrace, func() { e.do(func() { c.fail(err) }) })
}

// peerClosed (on the loop): the sender closed after its sends completed,
// i.e. after each was matched here. Receives UCX has matched keep going
// (their data may still be arriving; closeGrace bounds the wait); the
// others can never get a message and fail with err.
func (c *recvConn) peerClosed(err error) {
	e := c.p.e
	e.poll()
	e.probe()
	if c.cause() != nil {
		return
	}
	c.closing = err
	for rr := range c.pending {
		if rr.post1 != 0 {
			c.p.lib.Cancel(e.w, rr.post1) // completes as cancelled if unmatched
			continue
		}
		for _, f := range rr.found {
			if !f {
				delete(c.pending, rr)
				rr.req.finish(nil, err)
				break
			}
		}
	}
}

// Abort fails every pending and later receive with err and tells the peer.
func (c *recvConn) Abort(err error) {
	werr := &fnet.ConnError{Provider: "ucx", Device: c.dev, Remote: c.remote, Op: "recv", Err: err}
	_ = c.p.e.call(func() error { c.fail(werr); return nil })
	c.ctl.shut(frameAbort, err.Error())
}

// Close fails pending receives with errs.ErrClosed and closes the
// connection; the sender's pending sends fail with errs.ErrPeerLost.
func (c *recvConn) Close() error {
	_ = c.p.e.call(func() error { c.fail(c.errorf(errs.ErrClosed, "connection closed")); return nil })
	c.ctl.shut(frameClose, "")
	return nil
}

var _ fnet.RecvConn = (*recvConn)(nil)
