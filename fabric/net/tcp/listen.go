package tcp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// maxHandshakes bounds the sockets a listener checks at once; more are
// closed unread (a flood of stray dials cannot exhaust the process).
const maxHandshakes = 256

// listener accepts sockets in the background: each must open with a hello
// carrying the handle's nonce within the handshake deadline, or it is
// closed. Sockets of one connection (same connection id) are grouped;
// when all have arrived the connection is queued for Accept.
type listener struct {
	p      *Provider
	dev    string
	ln     *net.TCPListener
	h      handle
	st     state
	slots  chan struct{}
	notify chan struct{} // capacity 1: ready grew

	mu     sync.Mutex
	groups map[[connIDBytes]byte]*group
	ready  []*recvConn
}

type group struct {
	socks  []*net.TCPConn
	got    int
	device string
	timer  *time.Timer
}

// Listen opens a listening socket on the device's address.
func (p *Provider) Listen(ctx context.Context, dev int) (fnet.Listener, error) {
	if err := p.device(dev); err != nil {
		return nil, err
	}
	ln, err := p.opt.Ports.Listen(ctx, "tcp4", p.ips[dev].String())
	if err != nil {
		return nil, &fnet.ConnError{Provider: "tcp", Device: p.devs[dev].Name, Remote: "-", Op: "listen", Err: err}
	}
	tl := ln.(*net.TCPListener)
	l := &listener{p: p, dev: p.devs[dev].Name, ln: tl, st: newState(), slots: make(chan struct{}, maxHandshakes),
		notify: make(chan struct{}, 1), groups: map[[connIDBytes]byte]*group{}}
	l.h.addr = tl.Addr().(*net.TCPAddr).AddrPort()
	l.h.addr = netip.AddrPortFrom(l.h.addr.Addr().Unmap(), l.h.addr.Port())
	rand(l.h.nonce[:])
	if !p.track(l) {
		ln.Close()
		return nil, p.errClosed()
	}
	go l.acceptLoop()
	return l, nil
}

func (l *listener) Handle() []byte { return l.h.marshal() }

func (l *listener) acceptLoop() {
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			if l.st.failure() == nil {
				l.closeWith(fmt.Errorf("accept on %s: %w", l.h.addr, err))
			}
			return
		}
		select {
		case l.slots <- struct{}{}:
			go l.handshake(c)
		default:
			c.Close()
		}
	}
}

// handshake checks one socket's hello and answers it.
func (l *listener) handshake(c *net.TCPConn) {
	defer func() { <-l.slots }()
	c.SetDeadline(time.Now().Add(min(l.p.opt.Timeout, 5*time.Second)))
	var b [helloBytes]byte
	_, err := readFull(c, b[:])
	var h *hello
	if err == nil {
		h, err = parseHello(b[:], l.h.nonce)
	}
	if err == nil {
		_, err = c.Write([]byte(replyOK))
	}
	if err != nil {
		l.p.log.Debug("net tcp: dropped a socket", "listener", l.h.addr.String(), "from", c.RemoteAddr().String(), "error", err)
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	l.join(h, c)
}

// join adds a checked socket to its connection's group.
func (l *listener) join(h *hello, c *net.TCPConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.failure() != nil {
		c.Close()
		return
	}
	g := l.groups[h.conn]
	if g == nil {
		g = &group{socks: make([]*net.TCPConn, h.count), device: h.device}
		id := h.conn
		g.timer = time.AfterFunc(l.p.opt.Timeout, func() { l.drop(id) })
		l.groups[h.conn] = g
	}
	if len(g.socks) != h.count || g.socks[h.index] != nil {
		c.Close()
		return
	}
	g.socks[h.index] = c
	if g.got++; g.got < len(g.socks) {
		return
	}
	g.timer.Stop()
	delete(l.groups, h.conn)
	remote := fmt.Sprintf("%s (%s)", g.socks[0].RemoteAddr(), g.device)
	rc := newRecvConn(l.p, l.dev, remote, g.socks)
	if !l.p.track(rc) {
		rc.closeWith(l.p.errClosed())
		return
	}
	l.ready = append(l.ready, rc)
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// drop forgets a connection whose sockets did not all arrive in time.
func (l *listener) drop(id [connIDBytes]byte) {
	l.mu.Lock()
	g := l.groups[id]
	delete(l.groups, id)
	l.mu.Unlock()
	if g != nil {
		for _, s := range g.socks {
			if s != nil {
				s.Close()
			}
		}
	}
}

// Accept returns the next complete connection.
func (l *listener) Accept(ctx context.Context) (fnet.RecvConn, error) {
	for {
		l.mu.Lock()
		if len(l.ready) > 0 {
			rc := l.ready[0]
			l.ready = l.ready[1:]
			l.mu.Unlock()
			return rc, nil
		}
		l.mu.Unlock()
		select {
		case <-l.notify:
		case <-l.st.dead:
			return nil, l.st.failure()
		case <-ctx.Done():
			return nil, &fnet.ConnError{Provider: "tcp", Device: l.dev, Remote: "-", Op: "accept",
				Err: fmt.Errorf("listener %s: %w", l.h.addr, ctx.Err())}
		}
	}
}

func (l *listener) closeWith(err error) {
	if !l.st.set(&fnet.ConnError{Provider: "tcp", Device: l.dev, Remote: "-", Op: "accept", Err: fmt.Errorf("listener %s: %w", l.h.addr, err)}) {
		return
	}
	l.ln.Close()
	l.mu.Lock()
	groups, ready := l.groups, l.ready
	l.groups, l.ready = nil, nil
	l.mu.Unlock()
	for _, g := range groups {
		g.timer.Stop()
		for _, s := range g.socks {
			if s != nil {
				s.Close()
			}
		}
	}
	for _, rc := range ready {
		rc.closeWith(err)
	}
	l.p.untrack(l)
}

// Close stops listening; connections not yet accepted are closed, accepted
// ones stay.
func (l *listener) Close() error {
	l.closeWith(fmt.Errorf("listener %w", errs.ErrClosed))
	return nil
}
