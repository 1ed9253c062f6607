package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flexlink/fabric/linktest"
	"flexlink/internal/errs"
)

// cutProxy forwards TCP connections to target until cut; after that it
// drops everything in both directions but keeps the connections open, as
// a failed switch or a pulled cable does (no FIN, no RST).
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
	return p
}

func (p *cutProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		if !p.cut.Load() {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// TestSilentPeer: heartbeats keep an idle link up for several timeouts;
// once the path goes silent without closing, a pending receive fails with
// ErrPeerLost soon after one timeout.
func TestSilentPeer(t *testing.T) {
	const timeout = 500 * time.Millisecond
	env := map[string]string{"FLEXLINK_SOCKET_TIMEOUT": timeout.String()}
	job := newJob()
	e0, e1 := newEndpoint(t, config(job, 0, env)), newEndpoint(t, config(job, 1, env))
	a, err := parseAddress(e1.Address())
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, a.hostPort)
	a.hostPort = proxy.ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		l1, err := e1.Connect(ctx, 0, e0.Address())
		if err == nil {
			t.Cleanup(func() { l1.Close() })
		}
		errc <- err
	}()
	l0, err := e0.Connect(ctx, 1, []byte(a.String()))
	if err := errors.Join(err, <-errc); err != nil {
		t.Fatal(err)
	}
	defer l0.Close()

	// Idle for three timeouts, waiting on a receive that gets nothing: only
	// the heartbeats keep the link alive.
	r := l0.Recv(linktest.TagOf(1), make([]byte, 8))
	idle, cancelIdle := context.WithTimeout(context.Background(), 3*timeout)
	defer cancelIdle()
	if err := r.Wait(idle); !errors.Is(err, errs.ErrTimeout) {
		t.Fatalf("idle link: %v, want the wait to time out with the link up", err)
	}
	proxy.cut.Store(true)
	start := time.Now()
	err = linktest.Await(t, r, "receive over a cut path")
	took := time.Since(start)
	t.Logf("cut noticed after %v: %v", took, err)
	if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "no data or heartbeat") {
		t.Fatalf("receive over a cut path: %v, want ErrPeerLost for silence", err)
	}
	if took > 2*time.Second {
		t.Fatalf("cut noticed after %v; the timeout is %v", took, timeout)
	}
}
