package bootstrap

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// TestDialBeforeServer: a rank may start before the server; Dial keeps
// trying until the server listens.
func TestDialBeforeServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens on addr now

	type dialed struct {
		s   Store
		err error
	}
	got := make(chan dialed, 1)
	attempted := make(chan struct{})
	go func() {
		// One failed attempt first, so the retry path is what succeeds.
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
		}
		close(attempted)
		s, err := Dial(ctxFor(t, 10*time.Second), dialCfg(addr, 0, 1))
		got <- dialed{s, err}
	}()
	<-attempted
	srv, err := NewServer(ServerConfig{Addr: addr, Size: 1, Secret: testSecret, JobID: testJob})
	if err != nil {
		t.Fatalf("listen on the freed port %s (taken in between?): %v", addr, err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	d := <-got
	if d.err != nil {
		t.Fatal(d.err)
	}
	defer d.s.Close()
	if err := d.s.Barrier(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestDialDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := ln.Addr().String() // accepts (backlog) but never speaks
	t.Cleanup(func() { _ = ln.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	_ = closed.Close()
	for _, tc := range []struct{ name, addr string }{{"nothing listens", refused}, {"server silent", silent}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := Dial(ctx, dialCfg(tc.addr, 0, 1))
			if !errors.Is(err, errs.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Dial = %v; want ErrTimeout and DeadlineExceeded", err)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("Dial returned after %v with a 200ms deadline", el)
			}
		})
	}
}

// TestCloseIsGoodbye: a rank that closes is not reported lost; calls that
// need it fail with ErrClosed naming it, the others go on.
func TestCloseIsGoodbye(t *testing.T) {
	forEachImpl(t, 3, 10*time.Second, func(t *testing.T, stores []Store, ctx context.Context) {
		pend := make(chan error, 1)
		go func() { _, err := stores[0].AllGather(ctx, nil); pend <- err }()
		own := make(chan error, 1)
		go func() { _, err := stores[2].Get(ctx, "never"); own <- err }()
		if err := stores[2].Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-own; !errors.Is(err, errs.ErrClosed) {
			t.Fatalf("closing rank's pending Get = %v; want ErrClosed", err)
		}
		_, err := stores[1].AllGather(ctx, nil)
		for _, err := range []error{err, <-pend} {
			if !errors.Is(err, errs.ErrClosed) || errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "rank 2") {
				t.Fatalf("allgather needing a closed rank = %v; want ErrClosed naming rank 2", err)
			}
		}
		if err := stores[0].Put(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if v, err := stores[1].Get(ctx, "k"); err != nil || string(v) != "v" {
			t.Fatalf("get after a goodbye: %q, %v", v, err)
		}
		for _, s := range stores[:2] {
			if s.Err() != nil {
				t.Fatalf("rank %d failed after rank 2's goodbye: %v", s.Rank(), s.Err())
			}
		}
		if err := stores[2].Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
	})
}

// TestAbortThenClose is what the launcher does when a rank dies: Abort,
// then Close at once. The ranks must see the abort, not a lost server.
func TestAbortThenClose(t *testing.T) {
	job := newTCPJob(t, 4)
	ctx := ctxFor(t, 10*time.Second)
	res, n := pendingCalls(ctx, job.stores, 1)
	job.srv.Abort(errors.New("rank 3 exited with status 1"))
	if err := job.srv.Close(); err != nil {
		t.Fatal(err)
	}
	for range n {
		err := <-res
		if !errors.Is(err, errs.ErrAborted) || !strings.Contains(err.Error(), "launcher: rank 3 exited") {
			t.Fatalf("got %v; want the launcher's abort", err)
		}
	}
}

// TestAllGatherTooLarge: a result over the frame limit fails that call on
// every rank (not the job), in both implementations alike.
func TestAllGatherTooLarge(t *testing.T) {
	forEachImpl(t, 3, 20*time.Second, func(t *testing.T, stores []Store, ctx context.Context) {
		big := make([]byte, MaxFrameSize/3+1)
		errc := onAll(stores, func(s Store) error { _, err := s.AllGather(ctx, big); return err })
		for r, err := range errc {
			if !errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), "frame limit") {
				t.Fatalf("rank %d: %v; want ErrNotSupported: frame limit", r, err)
			}
		}
		if err := onAll(stores, func(s Store) error { return s.Barrier(ctx) }); err[0] != nil || err[1] != nil || err[2] != nil {
			t.Fatalf("barrier after a refused allgather: %v", err)
		}
	})
}
