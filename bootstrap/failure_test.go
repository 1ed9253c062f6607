package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// lossBound is the contract: other ranks learn of a loss within 2 s.
const lossBound = 2 * time.Second

// freezeProxy forwards one TCP connection until frozen; then it forwards
// nothing more in either direction but keeps both sockets open (a silent
// peer, as after a cable pull or a hung host).
type freezeProxy struct {
	ln     net.Listener
	frozen chan struct{}
	once   sync.Once
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, frozen: make(chan struct{})}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); _ = ln.Close() })
	go func() {
		a, err := ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", target)
		if err != nil {
			_ = a.Close()
			return
		}
		go func() { <-done; _ = a.Close(); _ = b.Close() }()
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				select {
				case <-p.frozen:
					<-done
					return
				default:
				}
				if n > 0 {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		go pipe(a, b)
		go pipe(b, a)
	}()
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }
func (p *freezeProxy) freeze()      { p.once.Do(func() { close(p.frozen) }) }

// pendingCalls starts a Get of a key nobody puts on each store, and an
// AllGather on each of the first len(stores)-skip stores (so that it
// cannot complete if skip > 0, or if the others are not all there). It
// returns the calls' results as they end, and how many there are.
func pendingCalls(ctx context.Context, stores []Store, skip int) (<-chan error, int) {
	out := make(chan error, 2*len(stores))
	for i, s := range stores {
		go func() {
			_, err := s.Get(ctx, "never")
			out <- err
		}()
		if i >= len(stores)-skip {
			continue
		}
		go func() {
			_, err := s.AllGather(ctx, []byte("x"))
			out <- err
		}()
	}
	return out, 2*len(stores) - skip
}

func TestRankLost(t *testing.T) {
	const n, victim = 4, 2
	tests := []struct {
		name string
		// setup returns the other ranks' stores, the victim's, and the
		// function that loses the victim.
		setup func(t *testing.T) (others []Store, v Store, lose func())
		// victimErr is a substring of the victim's own error.
		victimErr func(v Store) string
		victimIs  error
	}{
		{"tcp socket closed", func(t *testing.T) ([]Store, Store, func()) {
			stores := newTCPJob(t, n).stores
			v := stores[victim]
			return without(stores, victim), v, func() { _ = v.(*endpoint).tx.(*tcpClient).pc.conn.Close() }
		}, func(Store) string { return "" }, nil},
		{"tcp silent", func(t *testing.T) ([]Store, Store, func()) {
			srv, _ := testServer(t, n, 0)
			px := newFreezeProxy(t, srv.Addr())
			v := dialRanks(t, px.addr(), n, victim)[0]
			// The others wait long for the server's word: only the
			// victim's silence may run out (a stall of this process under
			// load must not make a healthy rank call the server lost).
			others := dialRanksTimeout(t, srv.Addr(), n, 10*time.Second, 0, 1, 3)
			return others, v, px.freeze
		}, func(v Store) string { return "bootstrap server at " + v.(*endpoint).tx.(*tcpClient).addr }, errs.ErrPeerLost},
		{"inproc", func(t *testing.T) ([]Store, Store, func()) {
			stores := NewInProc(n)
			v := stores[victim]
			return without(stores, victim), v, func() {
				if err := LoseInProc(v); err != nil {
					t.Error(err)
				}
			}
		}, func(Store) string { return "" }, errs.ErrClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			others, v, lose := tc.setup(t)
			ctx := ctxFor(t, 20*time.Second)
			res, nres := pendingCalls(ctx, others, 0) // the victim never joins the allgather
			vres, nv := pendingCalls(ctx, []Store{v}, 1)
			bound := lossBound
			if tc.name == "tcp silent" {
				// Silence is news only after the peer timeout (1.5 s by
				// default): the bound is that plus the closed socket's
				// allowance for a loaded machine.
				bound = peerTimeoutOr(0) + 1500*time.Millisecond
			}
			start := time.Now()
			lose()
			for range nres {
				err := <-res
				if el := time.Since(start); el > bound {
					t.Errorf("pending call failed only after %v", el)
				}
				wantLost(t, err, victim)
			}
			for _, s := range others {
				select {
				case <-s.Done():
				default:
					t.Fatalf("rank %d: Done not closed", s.Rank())
				}
				wantLost(t, s.Err(), victim)
				wantLost(t, s.Barrier(ctx), victim) // later calls fail at once
			}
			if tc.victimIs != nil {
				for range nv {
					err := <-vres
					if !errors.Is(err, tc.victimIs) || !strings.Contains(err.Error(), tc.victimErr(v)) {
						t.Errorf("victim's call: %v; want %v naming %q", err, tc.victimIs, tc.victimErr(v))
					}
				}
			}
		})
	}
}

func without(s []Store, i int) []Store {
	return append(append([]Store(nil), s[:i]...), s[i+1:]...)
}

func wantLost(t *testing.T, err error, rank int) {
	t.Helper()
	name := fmt.Sprintf("rank %d on host host-%d", rank, rank)
	if strings.Contains(fmt.Sprint(err), "inproc") {
		name = fmt.Sprintf("rank %d on host inproc-%d", rank, rank)
	}
	if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), name) {
		t.Fatalf("got %v; want ErrPeerLost naming %q", err, name)
	}
}

func TestServerLost(t *testing.T) {
	job := newTCPJob(t, 3)
	ctx := ctxFor(t, 20*time.Second)
	res, nres := pendingCalls(ctx, job.stores, 1)
	addr := job.srv.Addr()
	start := time.Now()
	if err := job.srv.Close(); err != nil {
		t.Fatal(err)
	}
	for range nres {
		err := <-res
		if el := time.Since(start); el > lossBound {
			t.Errorf("pending call failed only after %v", el)
		}
		if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "bootstrap server at "+addr) {
			t.Fatalf("got %v; want ErrPeerLost naming the server %s", err, addr)
		}
	}
}

func TestAbort(t *testing.T) {
	causes := []struct {
		name string
		err  error
		is   error
	}{
		{"mismatch", fmt.Errorf("rank 1 saw dtype float32, rank 0 float64: %w", errs.ErrMismatch), errs.ErrMismatch},
		{"peer lost", fmt.Errorf("nvlink to rank 3 gone: %w", errs.ErrPeerLost), errs.ErrPeerLost},
		{"timeout", fmt.Errorf("allreduce #7: %w", errs.ErrTimeout), errs.ErrTimeout},
		{"other", io.ErrUnexpectedEOF, errs.ErrAborted},
	}
	type source struct {
		name  string
		impl  string
		who   string
		abort func(stores []Store, srv *Server, err error) error
	}
	sources := []source{
		{"rank", "tcp", "rank 1", func(s []Store, _ *Server, err error) error { return s[1].Abort(err) }},
		{"launcher", "tcp", "the launcher", func(_ []Store, srv *Server, err error) error { srv.Abort(err); return nil }},
		{"rank", "inproc", "rank 1", func(s []Store, _ *Server, err error) error { return s[1].Abort(err) }},
	}
	for _, src := range sources {
		for _, c := range causes {
			t.Run(src.impl+"/"+src.name+"/"+c.name, func(t *testing.T) {
				var stores []Store
				var srv *Server
				if src.impl == "tcp" {
					job := newTCPJob(t, 3)
					stores, srv = job.stores, job.srv
				} else {
					stores = NewInProc(3)
				}
				ctx := ctxFor(t, 20*time.Second)
				res, nres := pendingCalls(ctx, []Store{stores[0], stores[2]}, 0) // rank 1 never joins the allgather
				if err := src.abort(stores, srv, c.err); err != nil {
					t.Fatal(err)
				}
				check := func(err error) {
					t.Helper()
					if !errors.Is(err, c.is) || !strings.Contains(err.Error(), src.who) || !strings.Contains(err.Error(), c.err.Error()) {
						t.Fatalf("got %v; want %v from %s with text %q", err, c.is, src.who, c.err)
					}
				}
				for range nres {
					check(<-res)
				}
				for _, s := range stores {
					<-s.Done()
					check(s.Err())
					check(s.Put(ctx, "k", nil))
				}
			})
		}
	}
}

func TestLateJoinerSeesAbort(t *testing.T) {
	srv, _ := testServer(t, 2, 0)
	early := dialRanks(t, srv.Addr(), 2, 0)[0]
	srv.Abort(fmt.Errorf("rank 1 failed to start: %w", errs.ErrPeerLost))
	<-early.Done()
	late := dialRanks(t, srv.Addr(), 2, 1)[0]
	err := late.Barrier(ctxFor(t, 10*time.Second))
	if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "failed to start") {
		t.Fatalf("late joiner's call = %v; want the launcher's abort", err)
	}
}

func TestCollectiveMismatch(t *testing.T) {
	forEachImpl(t, 2, 10*time.Second, func(t *testing.T, stores []Store, ctx context.Context) {
		errc := onAll(stores, func(s Store) error {
			if s.Rank() == 0 {
				_, err := s.AllGather(ctx, nil)
				return err
			}
			_, err := s.Broadcast(ctx, 1, []byte("b"))
			return err
		})
		for r, err := range errc {
			if !errors.Is(err, errs.ErrMismatch) || !strings.Contains(err.Error(), "broadcast(root 1)") {
				t.Fatalf("rank %d: %v; want ErrMismatch naming both calls", r, err)
			}
		}
	})
}

func TestContextHonoured(t *testing.T) {
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			stores := impl.make(t, 2)
			calls := []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"get", func(ctx context.Context) error { _, err := stores[0].Get(ctx, "absent"); return err }},
				{"allgather", func(ctx context.Context) error { _, err := stores[0].AllGather(ctx, nil); return err }},
				{"barrier", func(ctx context.Context) error { return stores[0].Barrier(ctx) }},
			}
			for _, c := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				start := time.Now()
				err := c.call(ctx)
				cancel()
				if !errors.Is(err, errs.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s: %v; want ErrTimeout and DeadlineExceeded", c.name, err)
				}
				if el := time.Since(start); el > time.Second {
					t.Fatalf("%s: returned %v after a 100ms deadline", c.name, el)
				}
				ctx, cancel = context.WithCancel(context.Background())
				cancel()
				if err := c.call(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, errs.ErrTimeout) {
					t.Fatalf("%s with cancelled ctx: %v", c.name, err)
				}
			}
			// The store still works (rank 0's timed-out collectives stay
			// contributed, so check with keys).
			ctx := ctxFor(t, 10*time.Second)
			if err := stores[1].Put(ctx, "absent", []byte("now")); err != nil {
				t.Fatal(err)
			}
			if v, err := stores[0].Get(ctx, "absent"); err != nil || string(v) != "now" {
				t.Fatalf("get after timeouts: %q, %v", v, err)
			}
		})
	}
}
