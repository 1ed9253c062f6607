package tcp

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// request is an ISend or IRecv: done is closed once, after sizes and err
// are set.
type request struct {
	once  sync.Once
	done  chan struct{}
	sizes []int
	err   error
}

func newRequest() *request { return &request{done: make(chan struct{})} }

func failedRequest(err error) *request {
	r := newRequest()
	r.complete(nil, err)
	return r
}

func (r *request) complete(sizes []int, err error) {
	r.once.Do(func() {
		r.sizes, r.err = sizes, err
		close(r.done)
	})
}

// Test never blocks.
func (r *request) Test() (bool, []int, error) {
	select {
	case <-r.done:
		return true, append([]int(nil), r.sizes...), r.err
	default:
		return false, nil, nil
	}
}

// Wait blocks on the completion channel (no polling) until done or ctx ends.
func (r *request) Wait(ctx context.Context) ([]int, error) {
	if err := fnet.WaitDone(ctx, r.done, "tcp"); err != nil {
		return nil, err
	}
	return append([]int(nil), r.sizes...), r.err
}

func rand(b []byte) { crand.Read(b) }

func readFull(r io.Reader, b []byte) (int, error) { return io.ReadFull(r, b) }

// why describes a socket error for a peer-lost message.
func why(err error, timeout time.Duration) string {
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by peer"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "connection reset by peer"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("no data or heartbeat for %v", timeout)
	}
	return err.Error()
}

// state is the failure state a connection's sides share: the first error
// wins, dead is closed with it.
type state struct {
	mu   sync.Mutex
	err  error
	dead chan struct{}
}

func newState() state { return state{dead: make(chan struct{})} }

// set records err if none was; it reports whether this call did.
func (s *state) set(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.err = err
	close(s.dead)
	return true
}

func (s *state) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// connErr wraps err so it names both ends.
func connErr(device, remote, op string, err error) error {
	var ce *fnet.ConnError
	if errors.As(err, &ce) {
		return err
	}
	return &fnet.ConnError{Provider: "tcp", Device: device, Remote: remote, Op: op, Err: err}
}

func peerLost(sock int, err error, timeout time.Duration) error {
	return fmt.Errorf("socket %d: %s: %w", sock, why(err, timeout), errs.ErrPeerLost)
}

func peerAborted(reason string) error {
	return fmt.Errorf("peer aborted the connection (%q): %w: %w", reason, errs.ErrPeerLost, errs.ErrAborted)
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

// writeAbort writes an abort frame within a short deadline, best effort.
func writeAbort(c *net.TCPConn, reason string) {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := make([]byte, hdrBytes+len(reason))
	(&header{kind: kindAbort, length: uint64(len(reason))}).put(b)
	copy(b[hdrBytes:], reason)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write(b)
}
