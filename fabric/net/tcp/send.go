package tcp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// sendConn is the sending side: a writer goroutine per socket, and an ack
// reader on socket 0 that completes sends as the receiver acknowledges
// them.
type sendConn struct {
	endpoint
	stripeMin uint64
	st        state
	writers   []*writer
	mu        sync.Mutex // orders ISend; guards seq, inflight
	seq       uint64
	inflight  []*sendOp // in seq order, not yet acknowledged
	lifecycle
	meter rateMeter
}

// endpoint is what both sides of a connection hold: the provider that
// tracks it, its names for errors, its sockets and their I/O timeout.
type endpoint struct {
	p           *Provider
	dev, remote string
	socks       []*net.TCPConn
	timeout     time.Duration
}

func newEndpoint(p *Provider, dev, remote string, socks []*net.TCPConn) endpoint {
	return endpoint{p: p, dev: dev, remote: remote, socks: socks, timeout: p.opt.Timeout}
}

// lifecycle is how a connection ends, the same for both sides: fail is
// the side's own failure (recvConn.fail, sendConn.fail), and closing waits
// for the connection's goroutines once before the provider forgets it.
type lifecycle struct {
	wg      sync.WaitGroup // the connection's goroutines
	once    sync.Once
	fail    func(err error, tell bool)
	untrack func()
}

// start readies the lifecycle of a connection about to start n
// goroutines.
func (l *lifecycle) start(n int, fail func(err error, tell bool), untrack func()) {
	l.fail, l.untrack = fail, untrack
	l.wg.Add(n)
}

// Abort fails everything with err and tells the peer.
func (l *lifecycle) Abort(err error) { l.fail(err, true) }

func (l *lifecycle) closeWith(err error) {
	l.fail(err, true)
	l.once.Do(func() {
		l.wg.Wait()
		l.untrack()
	})
}

// Close fails pending operations with errs.ErrClosed and waits for the
// goroutines.
func (l *lifecycle) Close() error {
	l.closeWith(fmt.Errorf("connection %w", errs.ErrClosed))
	return nil
}

func newSendConn(p *Provider, dev, remote string, socks []*net.TCPConn) *sendConn {
	c := &sendConn{endpoint: newEndpoint(p, dev, remote, socks),
		stripeMin: uint64(p.opt.StripeMin), st: newState()}
	for i, s := range socks {
		c.writers = append(c.writers, &writer{c: c, i: i, conn: s, ready: make(chan struct{}, 1)})
	}
	c.start(len(socks)+1, c.fail, func() { p.untrack(c) })
	for _, w := range c.writers {
		go w.run()
	}
	go c.readAcks()
	return c
}

// sendOp completes when every part has left its writer and the receiver
// has acknowledged the message, or, on failure, once no writer still
// reads its buffer.
type sendOp struct {
	req   *request
	seq   uint64
	size  int
	mu    sync.Mutex
	parts int // parts still queued or being written
	acked bool
	err   error
}

func (o *sendOp) settle() {
	switch {
	case o.parts > 0:
	case o.err != nil:
		o.req.complete(nil, o.err)
	case o.acked:
		o.req.complete([]int{o.size}, nil)
	}
}

func (o *sendOp) partDone(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.parts--
	if err != nil && o.err == nil {
		o.err = err
	}
	o.settle()
}

func (o *sendOp) ack() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acked = true
	o.settle()
}

func (o *sendOp) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil && !o.acked {
		o.err = err
	}
	o.settle()
}

// ISend queues the message's parts on the writers. It returns an error
// only for a message over the provider's bound; a failed connection fails
// the request instead.
func (c *sendConn) ISend(buf []byte, tag uint64, _ fnet.MemRegion) (fnet.Request, error) {
	if len(buf) > maxMessage {
		return nil, connErr(c.dev, c.remote, "send", fmt.Errorf("message of %d bytes over the bound of %d", len(buf), maxMessage))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.st.failure(); err != nil {
		return failedRequest(err), nil
	}
	op := &sendOp{req: newRequest(), seq: c.seq, size: len(buf)}
	c.seq++
	sp := parts(op.seq, uint64(len(buf)), len(c.writers), c.stripeMin)
	for _, s := range sp {
		if s.used {
			op.parts++
		}
	}
	c.inflight = append(c.inflight, op)
	for i, s := range sp {
		if !s.used {
			continue
		}
		h := header{kind: kindData, seq: op.seq, tag: tag, total: uint64(len(buf)), off: s.off, length: s.len}
		if !c.writers[i].push(part{op: op, h: h, data: buf[s.off : s.off+s.len]}) {
			op.partDone(c.st.failure())
		}
	}
	return op.req, nil
}

// ack completes the sends the receiver has counted.
func (c *sendConn) ack(count uint64) error {
	c.mu.Lock()
	if count > c.seq {
		c.mu.Unlock()
		return fmt.Errorf("receiver acknowledges %d messages of %d sent: %w", count, c.seq, errs.ErrPeerLost)
	}
	n := 0
	for n < len(c.inflight) && c.inflight[n].seq < count {
		n++
	}
	done := c.inflight[:n:n]
	c.inflight = c.inflight[n:]
	c.mu.Unlock()
	for _, op := range done {
		op.ack()
	}
	return nil
}

// readAcks reads socket 0's reverse direction: acks, heartbeats, aborts.
func (c *sendConn) readAcks() {
	defer c.wg.Done()
	br := bufio.NewReaderSize(&deadlineReader{c: c.socks[0], timeout: c.timeout}, 4096)
	var b [hdrBytes]byte
	for {
		_, err := io.ReadFull(br, b[:])
		if err != nil {
			c.fail(peerLost(0, err, c.timeout), false)
			return
		}
		h, err := parseHeader(b[:], false)
		if err != nil {
			c.fail(fmt.Errorf("socket 0: corrupt reverse stream: %v: %w", err, errs.ErrPeerLost), false)
			return
		}
		switch h.kind {
		case kindAck:
			err = c.ack(h.seq)
		case kindAbort:
			reason := make([]byte, h.length) // ≤ maxReason
			io.ReadFull(br, reason)
			err = peerAborted(string(reason))
		}
		if err != nil {
			c.fail(err, false)
			return
		}
	}
}

// fail ends the connection with err (the first failure wins): every send
// in flight fails, writers drain, sockets close. With tell, an abort frame
// goes to the peer first, best effort.
func (c *sendConn) fail(err error, tell bool) {
	err = connErr(c.dev, c.remote, "send", err)
	if !c.st.set(err) {
		return
	}
	c.mu.Lock()
	ops := c.inflight
	c.inflight = nil
	c.mu.Unlock()
	for _, op := range ops {
		op.fail(err)
	}
	if tell {
		for _, w := range c.writers {
			if w.wmu.TryLock() {
				writeAbort(w.conn, err.Error())
				w.wmu.Unlock()
			}
		}
	}
	for _, s := range c.socks {
		s.Close()
	}
}

// maxBatch is how many queued parts a writer hands to one writev.
const maxBatch = 32

type part struct {
	op   *sendOp
	h    header
	data []byte
}

// writer owns the sending half of one socket.
type writer struct {
	c     *sendConn
	i     int
	conn  *net.TCPConn
	wmu   sync.Mutex // held while writing; Abort's frame takes it if free
	mu    sync.Mutex
	parts []part
	shut  bool
	ready chan struct{}
}

func (w *writer) push(p part) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shut {
		return false
	}
	w.parts = append(w.parts, p)
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return true
}

func (w *writer) take(into []part) []part {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(len(w.parts), maxBatch)
	into = append(into[:0], w.parts[:n]...)
	clear(w.parts[:n])
	w.parts = w.parts[n:]
	return into
}

func (w *writer) run() {
	c := w.c
	defer c.wg.Done()
	beat := max(c.timeout/5, time.Millisecond)
	tick := time.NewTicker(beat)
	defer tick.Stop()
	hdrs := make([]byte, maxBatch*hdrBytes)
	var batch []part
	var bufs net.Buffers
	last := time.Now()
	for {
		if batch = w.take(batch); len(batch) > 0 {
			err := c.st.failure()
			if err == nil {
				bufs = bufs[:0]
				for j := range batch {
					h := hdrs[j*hdrBytes : (j+1)*hdrBytes]
					batch[j].h.put(h)
					bufs = append(bufs, h)
					if len(batch[j].data) > 0 {
						bufs = append(bufs, batch[j].data)
					}
				}
				w.wmu.Lock()
				_, werr := bufs.WriteTo(w.conn)
				w.wmu.Unlock()
				if werr != nil {
					c.fail(peerLost(w.i, werr, c.timeout), false)
					err = c.st.failure()
				}
				last = time.Now()
			}
			for j := range batch {
				batch[j].op.partDone(err)
			}
			clear(batch)
			continue
		}
		select {
		case <-w.ready:
		case now := <-tick.C:
			// Half a beat: a tick that fired late must not make the next
			// one skip its beat (two beats' silence).
			if now.Sub(last) >= beat/2 {
				var h [hdrBytes]byte
				(&header{kind: kindBeat}).put(h[:])
				w.wmu.Lock()
				_, err := w.conn.Write(h[:])
				w.wmu.Unlock()
				if err != nil {
					c.fail(peerLost(w.i, err, c.timeout), false)
				}
				last = now
			}
		case <-c.st.dead:
			w.mu.Lock()
			w.shut = true
			rest := w.parts
			w.parts = nil
			w.mu.Unlock()
			err := c.st.failure()
			for _, p := range rest {
				p.op.partDone(err)
			}
			return
		}
	}
}
