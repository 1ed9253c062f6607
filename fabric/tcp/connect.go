package tcp

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"flexlink/fabric"
	"flexlink/internal/errs"
)

// dial opens and proves the sockets to peer, then waits for the peer's
// Connect to confirm them all.
func (e *endpoint) dial(ctx context.Context, peer int, a address) (conns []*net.TCPConn, err error) {
	var stops []func() bool
	defer func() {
		fired := false
		for _, stop := range stops {
			fired = !stop() || fired
		}
		if err == nil && fired {
			err = fabric.CtxErr(ctx)
		}
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w (%w)", fabric.CtxErr(ctx), err)
			}
			for _, c := range conns {
				c.Close()
			}
			conns = nil
		}
	}()
	var d net.Dialer
	for i := range e.socks {
		c, err := d.DialContext(ctx, "tcp", a.hostPort)
		if err != nil {
			return conns, fmt.Errorf("dial socket %d: %w", i, err)
		}
		tc := c.(*net.TCPConn)
		conns = append(conns, tc)
		stops = append(stops, context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) }))
		h := hello{from: e.cfg.Rank, to: peer, index: i, socks: e.socks, id: a.id, nonce: newNonce(),
			job: e.cfg.JobID, comm: e.cfg.Comm}
		m1 := h.marshal()
		if _, err := tc.Write(m1); err != nil {
			return conns, fmt.Errorf("socket %d: send hello: %w", i, err)
		}
		m2 := make([]byte, nonceBytes+macBytes)
		if _, err := io.ReadFull(tc, m2); err != nil {
			return conns, fmt.Errorf("socket %d: read proof (wrong job or communicator?): %w", i, err)
		}
		if !hmac.Equal(m2[nonceBytes:], proof(e.cfg.Secret, "listener", m1, m2[:nonceBytes])) {
			return conns, fmt.Errorf("socket %d: listener did not prove job membership: %w", i, errs.ErrAuth)
		}
		if _, err := tc.Write(proof(e.cfg.Secret, "dialer", m1, m2[:nonceBytes])); err != nil {
			return conns, fmt.Errorf("socket %d: send proof: %w", i, err)
		}
	}
	for i, c := range conns {
		var ok [1]byte
		if _, err := io.ReadFull(c, ok[:]); err != nil {
			return conns, fmt.Errorf("socket %d: wait for the peer to accept: %w", i, err)
		}
		if ok[0] != 0 {
			return conns, fmt.Errorf("socket %d: peer refused the link (%d)", i, ok[0])
		}
	}
	return conns, nil
}

// await waits until peer's sockets have all arrived, then confirms them.
func (e *endpoint) await(ctx context.Context, peer int) ([]*net.TCPConn, error) {
	a, err := e.lb.Await(ctx, peer, func(a *arrival) bool { return a.n == len(a.conns) })
	if err != nil {
		return nil, err
	}
	return confirm(ctx, a.conns)
}

func confirm(ctx context.Context, conns []*net.TCPConn) ([]*net.TCPConn, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handshakeTimeout)
	}
	for i, c := range conns {
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte{0}); err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("confirm socket %d: %w: %w", i, err, errs.ErrPeerLost)
		}
		c.SetDeadline(time.Time{})
	}
	return conns, nil
}

// acceptLoop starts answering dialers and filing the proven sockets for
// their rank's Connect.
func (e *endpoint) acceptLoop() {
	e.lb.Accept(e.ln.AcceptTCP, func(conn *net.TCPConn) error {
		h, err := e.answer(conn)
		if err != nil {
			return err
		}
		return e.lb.File(conn, h.from, func(a *arrival, ok bool) (*arrival, error) { return arrive(h, conn, a, ok) })
	}, func(err error) {
		e.log.Error("accept failed; no more links can be made", "addr", e.addr.hostPort, "error", err)
	}, func(conn *net.TCPConn, err error) {
		e.log.Warn("dropped connection", "from", conn.RemoteAddr(), "error", err)
	})
}

// answer runs the listener's side of one socket's proof.
func (e *endpoint) answer(conn *net.TCPConn) (*hello, error) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	h, m1, err := readHello(conn)
	switch {
	case err != nil:
		return nil, err
	case h.job != e.cfg.JobID || h.comm != e.cfg.Comm:
		return nil, fmt.Errorf("hello for job %q communicator %q, this is job %q communicator %q", h.job, h.comm, e.cfg.JobID, e.cfg.Comm)
	case h.to != e.cfg.Rank || h.from < 0 || h.from >= h.to:
		return nil, fmt.Errorf("hello from rank %d to rank %d reached rank %d", h.from, h.to, e.cfg.Rank)
	case h.id != e.addr.id:
		return nil, fmt.Errorf("rank %d dialed endpoint %x, this is %x", h.from, h.id, e.addr.id)
	case h.socks < 1 || h.socks > maxSockets || h.index >= h.socks:
		return nil, fmt.Errorf("rank %d: socket %d of %d", h.from, h.index, h.socks)
	}
	nonce := newNonce()
	if _, err := conn.Write(append(nonce[:], proof(e.cfg.Secret, "listener", m1, nonce[:])...)); err != nil {
		return nil, fmt.Errorf("rank %d: send proof: %w", h.from, err)
	}
	m3 := make([]byte, macBytes)
	if _, err := io.ReadFull(conn, m3); err != nil {
		return nil, fmt.Errorf("rank %d: read proof: %w", h.from, err)
	}
	if !hmac.Equal(m3, proof(e.cfg.Secret, "dialer", m1, nonce[:])) {
		return nil, fmt.Errorf("rank %d did not prove job membership: %w", h.from, errs.ErrAuth)
	}
	conn.SetDeadline(time.Time{})
	return h, nil
}

// arrive adds a proven socket to a, the sockets of its rank already here
// (ok false: none yet), for its rank's Connect.
func arrive(h *hello, conn *net.TCPConn, a *arrival, ok bool) (*arrival, error) {
	if !ok {
		a = &arrival{conns: make([]*net.TCPConn, h.socks)}
	}
	if len(a.conns) != h.socks || a.conns[h.index] != nil {
		return nil, fmt.Errorf("rank %d: socket %d of %d does not fit the %d already here", h.from, h.index, h.socks, a.n)
	}
	a.conns[h.index] = conn
	a.n++
	return a, nil
}

// setUserTimeout bounds how long written data may stay unacknowledged.
func setUserTimeout(c *net.TCPConn, d time.Duration) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	})
}
