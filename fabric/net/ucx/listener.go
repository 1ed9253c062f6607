package ucx

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/ucx/internal/ucp"
	"github.com/flexlink/flexlink/internal/errs"
)

// listener accepts side-channel connections, runs the handshake in the
// background (a connector's Connect returns before Accept is called) and
// queues the receiving connections for Accept.
type listener struct {
	p     *Provider
	dev   device
	ln    net.Listener
	h     handle
	ready chan *recvConn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func (l *listener) Handle() []byte { return l.h.encode() }

// Accept returns the next connection whose handshake succeeded.
func (l *listener) Accept(ctx context.Context) (fnet.RecvConn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, l.errorf("accept", errs.ErrClosed)
	case <-ctx.Done():
		return nil, l.errorf("accept", ctx.Err())
	}
}

func (l *listener) errorf(op string, err error) error {
	return &fnet.ConnError{Provider: "ucx", Device: l.p.label(l.dev), Remote: "-", Op: op, Err: err}
}

// Close stops accepting; connections accepted but not yet returned by
// Accept are closed.
func (l *listener) Close() error {
	l.p.mu.Lock()
	delete(l.p.listeners, l)
	l.p.mu.Unlock()
	l.close()
	return nil
}

func (l *listener) close() {
	l.once.Do(func() {
		close(l.done)
		l.ln.Close()
	})
	l.wg.Wait()
	for {
		select {
		case c := <-l.ready:
			c.Close()
		default:
			return
		}
	}
}

func (l *listener) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rc, err := l.handshake(c)
			if err != nil {
				c.Close() // garbage or a peer that left: drop it, keep accepting
				return
			}
			select {
			case l.ready <- rc:
			case <-l.done:
				rc.Close()
			}
		}()
	}
}

// handshake reads the hello, registers the receiving connection with the
// engine (so its id is live before the connector can send) and replies with
// the worker address.
func (l *listener) handshake(c net.Conn) (*recvConn, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeTime))
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAliveConfig(keepAlive())
	}
	r := bufio.NewReader(c)
	name, err := readHello(r, l.h.nonce)
	if err != nil {
		return nil, err
	}
	rc := &recvConn{
		p: l.p, dev: l.p.label(l.dev),
		remote: fmt.Sprintf("%s (%s)", name, c.RemoteAddr()),
		ctl:    control{conn: c}, id: l.p.nextID.Add(1),
		pending: map[*recvReq]struct{}{},
		seqs:    recvSeqs{out: map[uint64]bool{}},
	}
	err = l.p.e.call(func() error {
		l.p.recvs[rc] = struct{}{}
		hr, _, err := l.p.lib.TagRecv(l.p.e.w, 0, 0, wiredTag(rc.id), ^uint64(0), 0)
		if err == nil && hr != 0 {
			rc.wired = hr
			l.p.e.track(&pending{r: hr, recv: true, done: func(ucp.Status, ucp.RecvInfo) { rc.wired = 0 }})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := writeReply(c, rc.id, l.p.addr, rc.dev); err != nil {
		rc.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	go rc.watch(r)
	return rc, nil
}

var _ fnet.Listener = (*listener)(nil)
