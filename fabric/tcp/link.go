package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"flexlink/fabric"
	"flexlink/fabric/internal/linkq"
	"flexlink/internal/errs"
)

// op is one posted Recv.
type op = linkq.Op

// link is one rank's end of a TCP link: k sockets, a writer goroutine and
// a reader goroutine on each. Send cuts a message into its parts (stripes)
// and queues part i on writer i; reader 0 takes the posted receives in
// order, matches each against the next header on socket 0, and hands the
// other parts' destinations to readers 1..k-1.
//
// Writers send a heartbeat frame on a socket idle for a fifth of the
// timeout; readers give up on a socket silent for the whole timeout.
type link struct {
	peer    int
	who     string // "rank 3 (host h, 10.0.0.2:4100)" for errors
	conns   []*net.TCPConn
	timeout time.Duration
	props   fabric.Props
	log     hclog.Logger

	sendMu  sync.Mutex
	txSeq   uint64
	writers []*writer

	rxq     *linkq.Queue
	rxSeq   uint64
	readers []*reader

	mu     sync.Mutex
	txErr  error // sending failed (sticky)
	rxErr  error // receiving failed (sticky)
	txDead chan struct{}
	rxDead chan struct{}

	wg        sync.WaitGroup
	closeOnce sync.Once
}

type linkConfig struct {
	peer    int
	who     string
	conns   []*net.TCPConn
	timeout time.Duration
	props   fabric.Props
	log     hclog.Logger
}

func newLink(c linkConfig) *link {
	l := &link{
		peer: c.peer, who: c.who, conns: c.conns, timeout: c.timeout, props: c.props, log: c.log,
		rxq: linkq.New(), txDead: make(chan struct{}), rxDead: make(chan struct{}),
	}
	for i, c := range c.conns {
		l.writers = append(l.writers, &writer{l: l, i: i, conn: c, ready: make(chan struct{}, 1)})
		d := &deadlineReader{c: c, timeout: l.timeout}
		l.readers = append(l.readers, &reader{l: l, i: i, br: bufio.NewReaderSize(d, 64<<10), assign: make(chan assignment, 1), gone: make(chan struct{})})
	}
	l.wg.Add(2 * len(c.conns))
	for i := range c.conns {
		go l.writers[i].run()
		if i == 0 {
			go l.readers[0].match()
		} else {
			go l.readers[i].serve()
		}
	}
	return l
}

func (l *link) Peer() int           { return l.peer }
func (l *link) Props() fabric.Props { return l.props }

// Send queues buf's parts on the writers; the request completes once every
// part has been written to its socket.
func (l *link) Send(tag fabric.Tag, buf []byte) fabric.Request {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	if err := l.failure(&l.txErr); err != nil {
		return fabric.DoneReq(err)
	}
	parts := stripes(uint64(len(buf)), len(l.writers))
	n := 1
	for n < len(parts) && parts[n] > 0 {
		n++
	}
	op := &sendOp{req: fabric.NewReq()}
	op.left.Store(int32(n))
	off := uint64(0)
	for i := range n {
		h := header{kind: kindData, seq: l.txSeq, total: uint64(len(buf)), part: parts[i], tag: tag}
		if !l.writers[i].push(part{op: op, h: h, data: buf[off : off+parts[i]]}) {
			op.done(l.failure(&l.txErr))
		}
		off += parts[i]
	}
	l.txSeq++
	return op.req
}

// Recv queues buf for the next message.
func (l *link) Recv(tag fabric.Tag, buf []byte) fabric.Request { return l.rxq.Push(tag, buf) }

// Abort fails every pending and later request with err and closes the
// sockets, so the peer's requests fail with errs.ErrPeerLost.
func (l *link) Abort(err error) { l.fail(err) }

// Close aborts with errs.ErrClosed and waits for the goroutines to end.
func (l *link) Close() error {
	l.fail(fmt.Errorf("tcp link to %s: %w", l.who, errs.ErrClosed))
	l.closeOnce.Do(l.wg.Wait)
	return nil
}

// fail ends the link with err (unless it already ended) and returns the
// receive side's sticky error.
func (l *link) fail(err error) error {
	l.failTx(err)
	l.mu.Lock()
	first := l.rxErr == nil
	if first {
		l.rxErr = err
		close(l.rxDead)
	}
	err = l.rxErr
	l.mu.Unlock()
	if first {
		l.rxq.Fail(err)
		for _, c := range l.conns {
			c.Close()
		}
	}
	return err
}

// failTx ends sending (the peer cannot take more) and returns the sticky
// send error. Receiving goes on until socket 0 ends, so that messages the
// peer sent before it left are still delivered.
func (l *link) failTx(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.txErr == nil {
		l.txErr = err
		close(l.txDead)
		if !errors.Is(err, errs.ErrClosed) {
			l.log.Debug("tcp link failed", "peer", l.peer, "error", err)
		}
	}
	return l.txErr
}

func (l *link) failure(p *error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return *p
}

// lost describes the loss of socket i.
func (l *link) lost(i int, err error) error {
	why := err.Error()
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		why = "connection closed by peer"
	case errors.Is(err, os.ErrDeadlineExceeded):
		why = fmt.Sprintf("no data or heartbeat for %v", l.timeout)
	}
	return fmt.Errorf("tcp link to %s, socket %d: %s: %w", l.who, i, why, errs.ErrPeerLost)
}

// sendOp completes its request when all its parts are written or failed.
type sendOp struct {
	req  *fabric.Req
	left atomic.Int32
	mu   sync.Mutex
	err  error
}

func (s *sendOp) done(err error) {
	if err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
	if s.left.Add(-1) == 0 {
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		s.req.Complete(err)
	}
}

type part struct {
	op   *sendOp
	h    header
	data []byte
}

// deadlineReader moves the read deadline forward as reading goes on, so
// only a socket silent for the whole timeout fails.
type deadlineReader struct {
	c       *net.TCPConn
	timeout time.Duration
	set     time.Time
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	if now := time.Now(); now.Sub(d.set) > d.timeout/8 {
		d.c.SetReadDeadline(now.Add(d.timeout))
		d.set = now
	}
	return d.c.Read(p)
}
