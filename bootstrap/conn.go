package bootstrap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Liveness. Both ends send a heartbeat every heartbeatFor(timeout); a
// reader that sees no bytes for the peer timeout declares the peer lost,
// so a silent peer is reported within the timeout plus one hop (with the
// default, well under the 2 s contract). A write that makes no progress
// for writeStall breaks the connection.
const (
	defaultPeerTimeout = 1500 * time.Millisecond
	maxHeartbeat       = 400 * time.Millisecond
	writeStall         = 5 * time.Second
	writeChunk         = 1 << 20
	ioBufSize          = 16 << 10
	// flushBound bounds how long a goodbye, an abort or a server shutdown
	// waits for queued frames to leave.
	flushBound = 2 * time.Second
	// drainGrace is how long a reader may go on after its writer failed.
	drainGrace = 500 * time.Millisecond
)

var errConnDown = errors.New("connection down")

func peerTimeoutOr(d time.Duration) time.Duration {
	if d <= 0 {
		return defaultPeerTimeout
	}
	return d
}

func heartbeatFor(timeout time.Duration) time.Duration { return min(maxHeartbeat, timeout/4) }

// idleConn puts progress deadlines on a connection: each Read must see a
// byte within readIdle, each chunk of a Write must go out within
// writeIdle. Zero durations leave deadlines alone (the handshake sets an
// absolute one).
type idleConn struct {
	net.Conn
	readIdle, writeIdle time.Duration
	// readBy, when not zero, is a hard read deadline (UnixNano) that the
	// writer sets when it fails, so the reader drains what has arrived and
	// then stops.
	readBy atomic.Int64
}

func (c *idleConn) Read(p []byte) (int, error) {
	if c.readIdle > 0 {
		d := time.Now().Add(c.readIdle)
		if by := c.readBy.Load(); by != 0 && by < d.UnixNano() {
			d = time.Unix(0, by)
		}
		if err := c.Conn.SetReadDeadline(d); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

// stopReadingBy bounds reads to t from now on, including a Read that is
// already waiting.
func (c *idleConn) stopReadingBy(t time.Time) {
	c.readBy.Store(t.UnixNano())
	_ = c.Conn.SetReadDeadline(t)
}

func (c *idleConn) Write(p []byte) (int, error) {
	if c.writeIdle == 0 {
		return c.Conn.Write(p)
	}
	done := 0
	for done < len(p) {
		end := min(len(p), done+writeChunk)
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.writeIdle)); err != nil {
			return done, err
		}
		n, err := c.Conn.Write(p[done:end])
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// peerConn is one established, authenticated connection: a writer
// goroutine drains a queue of encoded frames and sends heartbeats; the
// owner runs the read loop on br and calls readerExited when it ends.
//
// Closing is graceful so that nothing queued is lost to a TCP reset:
// shutdown flushes the queue, half-closes (FIN), waits for the read loop
// to see the peer's end, then closes. A write failure does not close the
// socket under the reader: it lets the reader drain what has arrived (an
// abort, say) for at most drainGrace.
type peerConn struct {
	conn    net.Conn
	ic      *idleConn
	br      *bufio.Reader
	bw      *bufio.Writer
	timeout time.Duration // peer timeout (read idle)
	out     outQueue
	life    connLife
}

// outQueue is what waits for the writer: encoded frames, whether the
// connection takes more, and why the writer failed.
type outQueue struct {
	mu       sync.Mutex
	queue    []outFrame
	stopping bool
	werr     error         // why the writer failed
	wake     chan struct{} // capacity 1: the queue is not empty
}

// connLife is the connection's shutdown handshake between its owner, the
// writer and the read loop.
type connLife struct {
	stop     chan struct{} // closed: flush the queue and exit
	dead     chan struct{} // closed when the writer has exited
	readDone chan struct{} // closed when the read loop has exited
	stopOnce sync.Once
	readOnce sync.Once
}

// outFrame is an encoded frame; done (if not nil) is closed once it has
// been flushed to the socket. b may be shared with other connections and
// is never modified.
type outFrame struct {
	b    []byte
	done chan struct{}
}

// newConnPair wraps a fresh connection for the handshake (no idle
// deadlines yet).
func newConnPair(c net.Conn) (*idleConn, *bufio.Reader, *bufio.Writer) {
	ic := &idleConn{Conn: c}
	return ic, bufio.NewReaderSize(ic, ioBufSize), bufio.NewWriterSize(ic, ioBufSize)
}

// startPeerConn switches a handshaken connection to progress deadlines
// (timeout of silence on reads) and starts its writer.
func startPeerConn(c net.Conn, ic *idleConn, br *bufio.Reader, bw *bufio.Writer, timeout time.Duration) *peerConn {
	_ = c.SetDeadline(time.Time{})
	ic.readIdle, ic.writeIdle = timeout, max(writeStall, timeout)
	p := &peerConn{
		conn: c, ic: ic, br: br, bw: bw, timeout: timeout,
		out:  outQueue{wake: make(chan struct{}, 1)},
		life: connLife{stop: make(chan struct{}), dead: make(chan struct{}), readDone: make(chan struct{})},
	}
	go p.writeLoop()
	return p
}

// send queues an encoded frame; it never blocks. done, if not nil, is
// closed when the frame has been written.
func (p *peerConn) send(b []byte, done chan struct{}) error {
	p.out.mu.Lock()
	if p.out.stopping {
		p.out.mu.Unlock()
		return errConnDown
	}
	p.out.queue = append(p.out.queue, outFrame{b, done})
	p.out.mu.Unlock()
	select {
	case p.out.wake <- struct{}{}:
	default:
	}
	return nil
}

// sendWait queues b and waits up to d for it to be written.
func (p *peerConn) sendWait(b []byte, d time.Duration) error {
	done := make(chan struct{})
	if err := p.send(b, done); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-p.life.dead:
		select {
		case <-done:
			return nil
		default:
		}
		return errConnDown
	case <-t.C:
		return errConnDown
	}
}

func (p *peerConn) take() []outFrame {
	p.out.mu.Lock()
	q := p.out.queue
	p.out.queue = nil
	p.out.mu.Unlock()
	return q
}

func (p *peerConn) writeLoop() {
	defer close(p.life.dead)
	hb := marshal(heartbeatMsg{})
	tick := time.NewTicker(heartbeatFor(p.timeout))
	defer tick.Stop()
	write := func(q []outFrame) bool {
		for _, f := range q {
			if _, err := p.bw.Write(f.b); err != nil {
				p.setWriteErr(err)
				return false
			}
		}
		if err := p.bw.Flush(); err != nil {
			p.setWriteErr(err)
			return false
		}
		for _, f := range q {
			if f.done != nil {
				close(f.done)
			}
		}
		return true
	}
	for {
		select {
		case <-p.out.wake:
		case <-tick.C:
			if !write([]outFrame{{b: hb}}) {
				p.fail()
				return
			}
		case <-p.life.stop:
			p.out.mu.Lock()
			p.out.stopping = true
			p.out.mu.Unlock()
			write(p.take())
			return
		}
		if q := p.take(); len(q) > 0 && !write(q) {
			p.fail()
			return
		}
	}
}

func (p *peerConn) setWriteErr(err error) {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	if p.out.werr == nil {
		p.out.werr = err
	}
}

// readErr prefers the writer's error when the writer's failure is what
// ended the read loop.
func (p *peerConn) readErr(err error) error {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	if p.out.werr != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("write: %w", p.out.werr)
	}
	return err
}

// fail marks the connection unusable after a write error; the reader gets
// drainGrace to take in what has already arrived.
func (p *peerConn) fail() {
	p.out.mu.Lock()
	p.out.stopping = true
	p.out.mu.Unlock()
	p.ic.stopReadingBy(time.Now().Add(drainGrace))
}

// readerExited tells shutdown that the read loop is over.
func (p *peerConn) readerExited() { p.life.readOnce.Do(func() { close(p.life.readDone) }) }

// shutdown flushes what is queued, half-closes, waits for the read loop
// to end (the peer closing its side), and closes; all within about d.
// Safe to call more than once and concurrently.
func (p *peerConn) shutdown(d time.Duration) {
	p.life.stopOnce.Do(func() { close(p.life.stop) })
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.life.dead:
		if cw, ok := p.conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		select {
		case <-p.life.readDone:
		case <-t.C:
		}
	case <-t.C:
	}
	_ = p.conn.Close()
}
