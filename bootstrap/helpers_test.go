package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// logWatch collects a logger's lines so that a test can wait for the
// server to report something (an event, not a sleep).
type logWatch struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{changed: make(chan struct{})} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.lines = append(w.lines, l)
	}
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

func (w *logWatch) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Debug})
}

// count returns how many lines contain every one of subs.
func (w *logWatch) count(subs ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
next:
	for _, l := range w.lines {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// waitCount waits until at least n lines contain all of subs.
func (w *logWatch) waitCount(t *testing.T, d time.Duration, n int, subs ...string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if w.count(subs...) >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("no log line with %q within %v; log:\n%s", subs, d, strings.Join(w.lines, "\n"))
		}
	}
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

const testJob = "job-test"

// tcpJob is a server and its ranks' stores.
type tcpJob struct {
	srv    *Server
	log    *logWatch
	stores []Store
}

func testServer(t testing.TB, size int, hs time.Duration) (*Server, *logWatch) {
	return testServerCfg(t, ServerConfig{Size: size, HandshakeTimeout: hs})
}

// testServerCfg starts a server on 127.0.0.1 with the test job's secret.
func testServerCfg(t testing.TB, cfg ServerConfig) (*Server, *logWatch) {
	t.Helper()
	lw := newLogWatch()
	cfg.Addr, cfg.Secret, cfg.JobID, cfg.Logger = "127.0.0.1:0", testSecret, testJob, lw.logger()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, lw
}

func dialCfg(addr string, rank, size int) DialConfig {
	return DialConfig{Addr: addr, Rank: rank, Size: size, Secret: testSecret, JobID: testJob, Host: fmt.Sprintf("host-%d", rank)}
}

// dialAll joins ranks [0,size) concurrently.
func dialAll(t testing.TB, addr string, size int) []Store {
	return dialAllTimeout(t, addr, size, 0)
}

// dialAllTimeout is dialAll with a peer timeout.
func dialAllTimeout(t testing.TB, addr string, size int, peerTimeout time.Duration) []Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores := make([]Store, size)
	errc := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := dialCfg(addr, r, size)
			cfg.PeerTimeout = peerTimeout
			stores[r], errc[r] = Dial(ctx, cfg)
		}()
	}
	wg.Wait()
	for r, err := range errc {
		if err != nil {
			t.Fatalf("dial rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range stores {
			_ = s.Close()
		}
	})
	return stores
}

func newTCPJob(t testing.TB, size int) *tcpJob {
	t.Helper()
	srv, lw := testServer(t, size, 0)
	return &tcpJob{srv: srv, log: lw, stores: dialAll(t, srv.Addr(), size)}
}

// forEachImpl runs body as a subtest per Store implementation, on a job
// of n fresh stores and a context that ends after d.
func forEachImpl(t *testing.T, n int, d time.Duration, body func(t *testing.T, stores []Store, ctx context.Context)) {
	t.Helper()
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			body(t, impl.make(t, n), ctxFor(t, d))
		})
	}
}

// impls builds a job of size ranks with each implementation.
var impls = []struct {
	name string
	make func(t testing.TB, size int) []Store
}{
	{"tcp", func(t testing.TB, size int) []Store { return newTCPJob(t, size).stores }},
	{"inproc", func(t testing.TB, size int) []Store {
		s := NewInProc(size)
		t.Cleanup(func() {
			for _, st := range s {
				_ = st.Close()
			}
		})
		return s
	}},
}

// onAll runs f for every rank concurrently and returns the errors.
func onAll(stores []Store, f func(s Store) error) []error {
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(s) }()
	}
	wg.Wait()
	return errs
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
