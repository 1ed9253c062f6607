package bootstrap

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"
)

// Liveness. Both ends send a heartbeat every heartbeatEvery; a reader that
// sees no bytes for peerTimeout declares the peer lost, so a silent peer is
// reported within peerTimeout plus one hop (well under the 2 s contract).
// A write that makes no progress for writeStall breaks the connection.
const (
	heartbeatEvery = 400 * time.Millisecond
	peerTimeout    = 1500 * time.Millisecond
	writeStall     = 5 * time.Second
	writeChunk     = 256 << 10
	ioBufSize      = 64 << 10
	// flushBound bounds how long a goodbye, an abort or a server shutdown
	// waits for queued frames to leave.
	flushBound = 2 * time.Second
)

var errConnDown = errors.New("connection down")

// idleConn puts progress deadlines on a connection: each Read must see a
// byte within readIdle, each chunk of a Write must go out within
// writeIdle. Zero durations leave deadlines alone (the handshake sets an
// absolute one).
type idleConn struct {
	net.Conn
	readIdle, writeIdle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	if c.readIdle > 0 {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.readIdle)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
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
// owner runs the read loop on br.
type peerConn struct {
	conn net.Conn
	ic   *idleConn
	br   *bufio.Reader
	bw   *bufio.Writer

	mu       sync.Mutex
	queue    []outFrame
	stopping bool

	wake     chan struct{} // capacity 1: the queue is not empty
	stop     chan struct{} // closed: flush the queue and exit
	dead     chan struct{} // closed when the writer has exited
	stopOnce sync.Once
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

// startPeerConn switches a handshaken connection to progress deadlines and
// starts its writer.
func startPeerConn(c net.Conn, ic *idleConn, br *bufio.Reader, bw *bufio.Writer) *peerConn {
	_ = c.SetDeadline(time.Time{})
	ic.readIdle, ic.writeIdle = peerTimeout, writeStall
	p := &peerConn{
		conn: c, ic: ic, br: br, bw: bw,
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		dead: make(chan struct{}),
	}
	go p.writeLoop()
	return p
}

// send queues an encoded frame; it never blocks. done, if not nil, is
// closed when the frame has been written.
func (p *peerConn) send(b []byte, done chan struct{}) error {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return errConnDown
	}
	p.queue = append(p.queue, outFrame{b, done})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
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
	case <-p.dead:
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
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	return q
}

func (p *peerConn) writeLoop() {
	defer close(p.dead)
	hb := marshal(heartbeatMsg{})
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	write := func(q []outFrame) bool {
		for _, f := range q {
			if _, err := p.bw.Write(f.b); err != nil {
				return false
			}
		}
		if err := p.bw.Flush(); err != nil {
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
		case <-p.wake:
		case <-tick.C:
			if !write([]outFrame{{b: hb}}) {
				p.fail()
				return
			}
		case <-p.stop:
			p.mu.Lock()
			p.stopping = true
			p.mu.Unlock()
			write(p.take())
			return
		}
		if q := p.take(); len(q) > 0 && !write(q) {
			p.fail()
			return
		}
	}
}

// fail marks the connection unusable after a write error and closes it, so
// that the read loop ends too.
func (p *peerConn) fail() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	_ = p.conn.Close()
}

// shutdown flushes what is queued (waiting at most d) and closes the
// connection. Safe to call more than once and concurrently.
func (p *peerConn) shutdown(d time.Duration) {
	p.stopOnce.Do(func() { close(p.stop) })
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.dead:
	case <-t.C:
	}
	_ = p.conn.Close()
}
