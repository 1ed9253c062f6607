package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/errs"
)

// dialHandshakeTimeout bounds the handshake when ctx has no earlier
// deadline.
const dialHandshakeTimeout = 10 * time.Second

// Dial joins the job as cfg.Rank: it connects to cfg.Addr, retrying until
// ctx ends (the server may start after the client), then authenticates
// both ways with cfg.Secret. It fails with an error wrapping errs.ErrAuth
// when either side cannot prove the secret, errs.ErrMismatch when the
// server refuses the rank (wrong job id or size, rank out of range or
// already joined), and errs.ErrTimeout (with ctx's error) when ctx's
// deadline passes first. ctx bounds only the dial; the Store's calls take
// their own contexts.
func Dial(ctx context.Context, cfg DialConfig) (Store, error) {
	what := fmt.Sprintf("bootstrap: rank %d dial %s", cfg.Rank, cfg.Addr)
	switch {
	case cfg.Size <= 0:
		return nil, fmt.Errorf("%s: size %d", what, cfg.Size)
	case cfg.Rank < 0 || cfg.Rank >= cfg.Size:
		return nil, fmt.Errorf("%s: rank out of range [0,%d)", what, cfg.Size)
	case len(cfg.Secret) == 0:
		return nil, fmt.Errorf("%s: empty job secret: %w", what, errs.ErrAuth)
	case len(cfg.JobID) > maxNameLen:
		return nil, fmt.Errorf("%s: job id longer than %d bytes", what, maxNameLen)
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if len(cfg.Host) > maxNameLen {
		cfg.Host = cfg.Host[:maxNameLen]
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	conn, err := dialRetry(ctx, cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	ic, br, bw := newConnPair(conn)
	deadline := time.Now().Add(dialHandshakeTimeout)
	d, ctxBound := ctx.Deadline()
	ctxBound = ctxBound && d.Before(deadline)
	if ctxBound {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	err = clientHandshake(br, bw, &cfg)
	if !stop() || ctx.Err() != nil {
		_ = conn.Close()
		return nil, ctxError(ctx, what+": handshake")
	}
	if err != nil {
		_ = conn.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if ctxBound { // the connection's deadline was ctx's
				return nil, fmt.Errorf("%s: handshake: %w (%w: %v)", what, errs.ErrTimeout, context.DeadlineExceeded, err)
			}
			return nil, fmt.Errorf("%s: handshake: %w (%w)", what, errs.ErrTimeout, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	c := &tcpClient{addr: cfg.Addr, log: cfg.Logger}
	c.pc = startPeerConn(conn, ic, br, bw, peerTimeoutOr(cfg.PeerTimeout))
	c.ep = newEndpoint(cfg.Rank, cfg.Size, c)
	go c.readLoop()
	cfg.Logger.Debug("joined bootstrap", "addr", cfg.Addr, "rank", cfg.Rank, "size", cfg.Size)
	return c.ep, nil
}

// dialRetry connects to addr, retrying with backoff until ctx ends.
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	wait := 10 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (last error: %v)", ctxError(ctx, "connect"), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last error: %v)", ctxError(ctx, "connect"), err)
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// tcpClient is the TCP transport of one rank's endpoint.
type tcpClient struct {
	addr string
	log  hclog.Logger
	pc   *peerConn
	ep   *endpoint
}

func (c *tcpClient) peer() string { return "bootstrap server at " + c.addr }

func (c *tcpClient) send(m message) error { return c.pc.send(marshal(m), nil) }

func (c *tcpClient) sendWait(m message, d time.Duration) error {
	return c.pc.sendWait(marshal(m), d)
}

func (c *tcpClient) close() { c.pc.shutdown(flushBound) }

func (c *tcpClient) gone() <-chan struct{} { return c.pc.life.readDone }

// readLoop hands the server's messages to the endpoint until the
// connection ends; an end the rank did not ask for is a lost server.
func (c *tcpClient) readLoop() {
	err := func() error {
		for {
			f, err := readFrame(c.pc.br, MaxFrameSize)
			if err != nil {
				return err
			}
			m, err := decodeMsg(f)
			if err != nil {
				return err
			}
			switch m.(type) {
			case collResMsg, replyMsg, abortMsg:
				c.ep.handle(m)
			case heartbeatMsg:
			default:
				return fmt.Errorf("unexpected %s from server: %w", m.msgType(), errMalformed)
			}
		}
	}()
	c.pc.readerExited()
	if c.ep.isClosing() {
		return
	}
	err = c.pc.readErr(err)
	c.log.Error("lost bootstrap server", "addr", c.addr, "rank", c.ep.rank, "error", err)
	c.ep.failWith(&serverLost{fmt.Errorf("bootstrap: rank %d: %s lost: %s: %w", c.ep.rank, c.peer(), describeReadErr(err, c.pc.timeout), errs.ErrPeerLost)})
	c.pc.shutdown(0)
}

// serverLost is a store's error when its server was lost: its text, and
// ErrServerLost beside what it wraps.
type serverLost struct{ err error }

func (e *serverLost) Error() string   { return e.err.Error() }
func (e *serverLost) Unwrap() []error { return []error{e.err, ErrServerLost} }

// describeReadErr says in words why a read loop ended.
func describeReadErr(err error, timeout time.Duration) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		return "connection closed"
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("silent for more than %v", timeout)
	}
	return err.Error()
}
