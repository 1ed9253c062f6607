package ucx

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/ucx/internal/ucp"
	"github.com/flexlink/flexlink/internal/errs"
)

// Tag layout (see the package doc): connection id | sequence | user tag.
const (
	// UserTagBits is how many low bits of a tag the user may set.
	UserTagBits = 20
	// MaxUserTag is the largest tag ISend and IRecv accept.
	MaxUserTag = 1<<UserTagBits - 1
	seqBits    = 12
	// seqWindow bounds the received messages outstanding on a connection.
	seqWindow = 1 << seqBits
	// matchMask selects the connection id and sequence bits.
	matchMask = ^uint64(MaxUserTag)
)

// wiredTag is the tag of a connection's handshake message: connection id
// 0 is never assigned, so it cannot collide with a data message.
func wiredTag(id uint32) uint64 { return uint64(id) }

func wireTag(id uint32, seq uint64, user uint64) uint64 {
	return uint64(id)<<32 | (seq&(seqWindow-1))<<UserTagBits | user
}

// request is one ISend or IRecv; the engine loop publishes its result and
// closes done, which wakes a waiter without polling.
type request struct {
	res  atomic.Pointer[result]
	done chan struct{}
}

func newRequest() *request { return &request{done: make(chan struct{})} }

type result struct {
	sizes []int
	err   error
}

// finish publishes the outcome once; later calls are ignored.
func (r *request) finish(sizes []int, err error) {
	if r.res.CompareAndSwap(nil, &result{sizes: sizes, err: err}) {
		close(r.done)
	}
}

func (r *request) Test() (bool, []int, error) {
	if p := r.res.Load(); p != nil {
		return true, p.sizes, p.err
	}
	return false, nil, nil
}

// Wait blocks on the completion channel until done or ctx ends: a waiter
// that polled (as this provider's did) took the cores the engine and the
// kernel's socket copies need (one way over loopback: 1.4 GB/s polled,
// 3.2 GB/s woken; scripts/bench-net.sh).
func (r *request) Wait(ctx context.Context) ([]int, error) {
	if err := fnet.WaitDone(ctx, r.done, "ucx"); err != nil {
		return nil, err
	}
	p := r.res.Load()
	return p.sizes, p.err
}

func failed(err error) *request {
	r := newRequest()
	r.finish(nil, err)
	return r
}

// addr is the address UCX gets for buf (0 for an empty one).
func addr(buf []byte) uintptr {
	if len(buf) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&buf[0]))
}

// sendConn is the sending side: a UCP endpoint to the listener's worker.
type sendConn struct {
	p      *Provider
	dev    string
	remote string
	ctl    control
	id     uint32

	// Owned by the engine loop.
	ep      ucp.Ep
	seq     uint64
	pending map[*request]struct{}
	err     error // set once the connection failed
}

// Connect dials the listener's side channel, learns its worker address and
// connection id, and creates the endpoint.
func (p *Provider) Connect(ctx context.Context, dev int, h []byte) (fnet.SendConn, error) {
	d, err := p.device(dev)
	if err != nil {
		return nil, err
	}
	cerr := func(remote string, err error) error {
		return &fnet.ConnError{Provider: "ucx", Device: p.label(d), Remote: remote, Op: "connect", Err: err}
	}
	hd, err := decodeHandle(h)
	if err != nil {
		return nil, cerr("?", err)
	}
	remote := hd.addr.String()
	dl := net.Dialer{KeepAliveConfig: keepAlive()}
	c, err := dl.DialContext(ctx, "tcp", remote)
	if err != nil {
		return nil, cerr(remote, fnet.Unreachable(err))
	}
	deadline := time.Now().Add(handshakeTime)
	if t, ok := ctx.Deadline(); ok && t.Before(deadline) {
		deadline = t
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	r := bufio.NewReader(c)
	if err := writeHello(c, hd.nonce, p.label(d)); err != nil {
		c.Close()
		return nil, cerr(remote, fnet.Unreachable(err))
	}
	id, waddr, name, err := readReply(r)
	if err != nil {
		c.Close()
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			// The listener closes a socket whose hello it refuses without
			// a word, as the kernel does when the listener's process dies:
			// in a job whose handles come from its own exchange, a peer
			// that dies as it is dialed is the likely one (the tcp
			// provider's exchange says the same).
			return nil, cerr(remote, fmt.Errorf("handshake: the listener closed the connection before answering (its process is gone, or it refused a stale handle or another provider version): %w: %w", err, errs.ErrPeerLost))
		default:
			err = fnet.Unreachable(err)
		}
		return nil, cerr(remote, fmt.Errorf("handshake: %w (peer refused or is not a ucx listener)", err))
	}
	_ = c.SetDeadline(time.Time{})
	sc := &sendConn{
		p: p, dev: p.label(d), remote: fmt.Sprintf("%s (%s)", name, remote), ctl: control{conn: c}, id: id,
		pending: map[*request]struct{}{},
	}
	// Create the endpoint and send a zero-byte synchronous "wired" message
	// on the connection's reserved tag: its completion needs the
	// listener's acknowledgement, so UCX's wire-up is finished both ways
	// before the connection is handed out (UCX 1.13 asserts when a peer
	// vanishes while a wire-up reply is still queued).
	wired := make(chan error, 1)
	err = p.e.call(func() error {
		ep, err := p.lib.EpCreate(p.e.w, waddr)
		if err != nil {
			return err
		}
		sc.ep = ep
		p.sends[sc] = struct{}{}
		wr, err := p.lib.TagSendSync(ep, 0, 0, wiredTag(id), 0)
		if err != nil || wr == 0 {
			wired <- err
			return nil
		}
		p.e.track(&pending{r: wr, done: func(st ucp.Status, _ ucp.RecvInfo) { wired <- p.lib.Err("wired message", st) }})
		return nil
	})
	if err == nil {
		select {
		case err = <-wired:
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(time.Until(deadline)):
			err = fmt.Errorf("wire-up not done in %v", handshakeTime)
		}
	}
	if err != nil {
		// Force-close: the wired message may still be in flight, and UCX
		// 1.13 asserts (the process aborts) when an endpoint closed by
		// flushing is destroyed with a send outstanding.
		_ = p.e.call(func() error { sc.fail(cerr(sc.remote, err)); return nil })
		c.Close()
		return nil, cerr(sc.remote, err)
	}
	go sc.watch(r)
	return sc, nil
}

func (c *sendConn) errorf(sentinel error, format string, args ...any) error {
	return &fnet.ConnError{Provider: "ucx", Device: c.dev, Remote: c.remote, Op: "send",
		Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)}
}

// ISend posts a synchronous tagged send; see fnet.SendConn.
func (c *sendConn) ISend(buf []byte, tag uint64, mr fnet.MemRegion) (fnet.Request, error) {
	if tag > MaxUserTag {
		return nil, c.errorf(errs.ErrNotSupported, "tag %#x over the %d bits the ucx provider leaves to users (max %#x)", tag, UserTagBits, MaxUserTag)
	}
	memh := memhFor(mr, buf)
	r := newRequest()
	if !c.p.e.do(func() { c.post(r, buf, tag, memh) }) {
		return failed(c.errorf(errs.ErrClosed, "provider closed")), nil
	}
	return r, nil
}

// post runs on the loop.
func (c *sendConn) post(r *request, buf []byte, tag uint64, memh ucp.Memh) {
	if c.err != nil {
		r.finish(nil, c.err)
		return
	}
	seq := c.seq
	c.seq++
	ur, err := c.p.lib.TagSendSync(c.ep, addr(buf), len(buf), wireTag(c.id, seq, tag), memh)
	if err != nil {
		c.fail(c.errorf(errs.ErrPeerLost, "post: %v", err))
		r.finish(nil, c.err)
		return
	}
	n := []int{len(buf)}
	if ur == 0 {
		r.finish(n, nil)
		return
	}
	c.pending[r] = struct{}{}
	c.p.e.track(&pending{r: ur, keep: buf, done: func(st ucp.Status, _ ucp.RecvInfo) {
		delete(c.pending, r)
		if st == ucp.StatusOK {
			r.finish(n, nil)
			return
		}
		if c.err == nil {
			c.fail(c.errorf(errs.ErrPeerLost, "%v", c.p.lib.Err("ucp_tag_send_sync_nbx", st)))
		}
		r.finish(nil, c.err)
	}})
}

// fail (on the loop) fails the connection: every pending send gets err, the
// endpoint is force-closed (UCX cancels what it still holds).
func (c *sendConn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	for r := range c.pending {
		r.finish(nil, c.err)
		delete(c.pending, r)
	}
	if c.ep != 0 {
		if cr, err := c.p.lib.EpClose(c.ep, true); err == nil && cr != 0 {
			c.p.e.track(&pending{r: cr, done: func(ucp.Status, ucp.RecvInfo) {}})
		}
		c.ep = 0
	}
	delete(c.p.sends, c)
}

// watch reads the control channel until it ends.
func (c *sendConn) watch(r *bufio.Reader) {
	err, _ := watchCtrl(r, func(e error, why string) error { return c.errorf(e, "%s", why) })
	c.p.e.do(func() { c.fail(err) })
}

// Abort fails every pending and later send with err and tells the peer.
func (c *sendConn) Abort(err error) {
	werr := &fnet.ConnError{Provider: "ucx", Device: c.dev, Remote: c.remote, Op: "send", Err: err}
	_ = c.p.e.call(func() error { c.fail(werr); return nil })
	c.ctl.shut(frameAbort, err.Error())
}

// Close fails sends still pending with errs.ErrClosed and closes the
// connection; the receiver's receives for messages never sent then fail
// with errs.ErrPeerLost. With no send pending, the endpoint is flushed
// first (at most closeGrace), so the last messages' data reaches the
// receiver before the close notice.
func (c *sendConn) Close() error {
	flushed := make(chan struct{})
	err := c.p.e.call(func() error {
		closed := c.errorf(errs.ErrClosed, "connection closed")
		if len(c.pending) > 0 || c.err != nil || c.ep == 0 {
			c.fail(closed)
			close(flushed)
			return nil
		}
		c.err = closed
		r, err := c.p.lib.EpClose(c.ep, false)
		c.ep = 0
		delete(c.p.sends, c)
		if err != nil || r == 0 {
			close(flushed)
			return nil
		}
		c.p.e.track(&pending{r: r, done: func(ucp.Status, ucp.RecvInfo) { close(flushed) }})
		return nil
	})
	if err == nil {
		select {
		case <-flushed:
		case <-time.After(closeGrace):
		}
	}
	c.ctl.shut(frameClose, "")
	return nil
}

// closeGrace bounds a graceful close: the sender's flush, and how long a
// receiver whose sender closed waits for messages already matched.
const closeGrace = 10 * time.Second

// control is a connection's side channel (see handshake.go): the peer
// hears of an abort or a close on it, once.
type control struct {
	conn net.Conn
	once sync.Once
}

// shut tells the peer, once, and closes the side channel.
func (c *control) shut(typ byte, text string) {
	c.once.Do(func() {
		_ = writeFrame(c.conn, typ, text)
		c.conn.Close()
	})
}

// watchCtrl reads the control channel until the peer's notice or the end
// of the stream and returns the error the connection fails with, and
// whether the peer closed gracefully.
func watchCtrl(r *bufio.Reader, mk func(sentinel error, why string) error) (error, bool) {
	typ, text, err := readFrame(r)
	switch {
	case err != nil:
		return mk(errs.ErrPeerLost, fmt.Sprintf("control connection lost: %v", err)), false
	case typ == frameAbort:
		// Both sentinels: the peer is lost to this connection (what every
		// provider reports), and it was an abort.
		return mk(fmt.Errorf("%w, %w", errs.ErrPeerLost, errs.ErrAborted), "peer aborted: "+text), false
	default:
		return mk(errs.ErrPeerLost, "peer closed the connection"), true
	}
}

var _ fnet.SendConn = (*sendConn)(nil)
