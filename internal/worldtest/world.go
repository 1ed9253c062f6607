// Package worldtest starts in-process worlds of N ranks for tests: every
// rank a goroutine, joined through an in-process bootstrap store
// (bootstrap.NewInProc), on a chosen host transport. It is the one way
// tests build a world; a test says what differs (the ranks, transport,
// settings, hosts) in a Spec and gets each rank's communicator.
//
// Two levels:
//
//   - Run and Start open a communicator per rank with the caller's
//     constructor (rank.New, internal/comm.New: both take a store and
//     join.Options), so the world runs the real rank runtime: bootstrap,
//     transport selection (FLEXLINK_TRANSPORT shm, tcp, net or auto), lazy
//     links, the call queue.
//   - Connect joins N ranks pairwise by links of one transport (the fake
//     fabric, shm or tcp) with no runtime above them, for tests of the host
//     algorithms (collectives.Engine) over Peers.
//
// Nothing here waits forever: opening the world is bounded by
// Spec.Timeout, and Run reports ranks still running after Spec.Hang.
package worldtest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/settings"
)

// Spec describes a world. The zero value of each field has a default.
type Spec struct {
	N int // ranks

	// Transport is FLEXLINK_TRANSPORT for every rank (shm, tcp, net or
	// auto); "" leaves it to Env (auto when Env does not set it either).
	Transport string

	// Env holds every rank's FLEXLINK_* settings; RankEnv(r), when set,
	// adds or overrides rank r's own.
	Env     map[string]string
	RankEnv func(r int) map[string]string

	// Host names rank r's host; ranks with different names talk as if on
	// different machines. nil: every rank on "testhost" (see PerHost).
	Host func(r int) string

	// KeepOnLoss makes a store that keeps going after a rank is lost
	// (bootstrap.NewInProcKeepOnLoss, as libnccl's rendezvous does).
	KeepOnLoss bool

	// Timeout bounds opening the world (every rank's constructor). 0: 30 s.
	Timeout time.Duration
	// Hang bounds Run's bodies, from when every rank's communicator is
	// open: ranks still running after it are reported as a hang (the test
	// fails, Run returns). 0: 5 minutes.
	Hang time.Duration

	// CheckClose makes Run report a rank's Close error when its body
	// succeeded.
	CheckClose bool

	// Secret authenticates the world's links. nil: a fixed test secret.
	Secret []byte
}

// PerHost places per consecutive ranks on each host: ranks 0..per-1 on
// "host0", the next per on "host1", and so on.
func PerHost(per int) func(r int) string {
	return func(r int) string { return fmt.Sprint("host", r/per) }
}

// OwnHost places every rank on a host of its own: "host0", "host1", ...
func OwnHost(r int) string { return fmt.Sprint("host", r) }

// Open makes rank's communicator over store with opt: rank.New and
// internal/comm.New have this shape.
type Open[C any] func(ctx context.Context, store bootstrap.Store, opt join.Options) (C, error)

// Members are a world's stores and per-rank options, before any
// communicator is made: for tests that open a rank's communicator by hand
// (a second world joined from inside another's ranks, or a rank whose
// opening is part of the test).
type Members struct {
	spec   Spec
	stores []bootstrap.Store
	job    string
}

// Plan makes the members of the world s describes: a fresh store per rank
// and a job id of its own, so worlds of concurrent tests never share
// shared-memory segment names.
func Plan(s Spec) *Members {
	if s.N < 1 {
		panic(fmt.Sprintf("worldtest: %d ranks", s.N))
	}
	m := &Members{spec: s}
	m.job = fmt.Sprintf("wt%d-%p", time.Now().UnixNano(), m)
	if s.KeepOnLoss {
		m.stores = bootstrap.NewInProcKeepOnLoss(s.N)
	} else {
		m.stores = bootstrap.NewInProc(s.N)
	}
	return m
}

// Store is rank r's bootstrap store.
func (m *Members) Store(r int) bootstrap.Store { return m.stores[r] }

// Options are rank r's options: its settings, host, the job id and secret.
func (m *Members) Options(r int) join.Options {
	vars := map[string]string{}
	if m.spec.Transport != "" {
		vars["FLEXLINK_TRANSPORT"] = m.spec.Transport
	}
	for k, v := range m.spec.Env {
		vars[k] = v
	}
	if m.spec.RankEnv != nil {
		for k, v := range m.spec.RankEnv(r) {
			vars[k] = v
		}
	}
	if _, ok := vars["FLEXLINK_NET_IFNAME"]; !ok {
		// The network transport takes the loopback unless the test names
		// its NICs: the machine's other interfaces come and go (bridges
		// and namespaces another test package makes, scripts/testcluster),
		// and a rail that vanishes mid-test refuses the connection (CI,
		// 2026-11-30: TestCollectivesOverRealTransports dialled fswbr1,
		// launcher/clustertest's bridge, as it was torn down).
		vars["FLEXLINK_NET_IFNAME"] = "=lo"
	}
	host := "testhost"
	if m.spec.Host != nil {
		host = m.spec.Host(r)
	}
	secret := m.spec.Secret
	if secret == nil {
		secret = []byte("worldtest secret")
	}
	return join.Options{Env: settings.Map(vars), Host: host, JobID: m.job, Secret: secret}
}

// Lose makes rank r vanish from the bootstrap, as a crashed process does
// (bootstrap.LoseInProc): the others learn it is lost.
func (m *Members) Lose(r int) error { return bootstrap.LoseInProc(m.stores[r]) }

// Comm is what a world holds per rank: a communicator that can be closed
// (rank.Comm, internal/comm.Comm). A nil one is a rank the test has let go.
type Comm interface {
	comparable
	io.Closer
}

// World is an opened world: Comms[r] is rank r's communicator. A test
// that sets Comms[r] to nil (a rank it killed) keeps the cleanup from
// closing it.
type World[C Comm] struct {
	*Members
	Comms []C
}

// Start opens every rank's communicator at once with open and fails the
// test (naming the rank) if any cannot be made. The communicators are
// closed when the test ends.
func Start[C Comm](t testing.TB, s Spec, open Open[C]) *World[C] {
	t.Helper()
	m := Plan(s)
	comms, errs := openAll(m, open)
	w := &World[C]{Members: m, Comms: comms}
	t.Cleanup(func() { Each(w.Comms, func(_ int, c C) error { return c.Close() }) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("open rank %d of %d: %v", r, s.N, err)
		}
	}
	return w
}

// openAll calls open on every rank at once, bounded by the spec's
// Timeout, and returns the communicators and errors by rank.
func openAll[C any](m *Members, open Open[C]) ([]C, []error) {
	timeout := m.spec.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	comms := make([]C, m.spec.N)
	errs := make([]error, m.spec.N)
	var wg sync.WaitGroup
	for r := range m.spec.N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = open(ctx, m.stores[r], m.Options(r))
		}()
	}
	wg.Wait()
	return comms, errs
}

// Run opens every rank's communicator, runs body on each at once, closes
// it, and returns each rank's error (its opening's, else body's, else
// with CheckClose its Close's). A rank
// still running after the spec's Hang fails the test as a hang and gets
// an error saying so; Run then returns without waiting for it.
func Run[C Comm](t testing.TB, s Spec, open Open[C], body func(c C) error) []error {
	t.Helper()
	m := Plan(s)
	hang := s.Hang
	if hang == 0 {
		hang = 5 * time.Minute
	}
	// Each rank reports twice: when its body returns, and when it is
	// closed (a world communicator's Close waits for its peers).
	type result struct {
		r      int
		err    error
		closed bool
	}
	done := make(chan result, 2*s.N)
	var once sync.Once
	var comms []C
	var openErrs []error
	opened := make(chan struct{})
	for r := range s.N {
		go func() {
			once.Do(func() { comms, openErrs = openAll(m, open); close(opened) })
			<-opened
			if openErrs[r] != nil {
				done <- result{r, openErrs[r], true}
				return
			}
			err := body(comms[r])
			done <- result{r, err, false}
			if cerr := comms[r].Close(); cerr != nil && err == nil && s.CheckClose {
				err = fmt.Errorf("close: %w", cerr)
			}
			done <- result{r, err, true}
		}()
	}
	errs := make([]error, s.N)
	running := make(map[int]bool, s.N) // rank -> its body has returned
	for r := range s.N {
		running[r] = false
	}
	<-opened // bounded by the spec's Timeout; Hang counts from here
	timer := time.NewTimer(hang)
	defer timer.Stop()
	for len(running) > 0 {
		select {
		case res := <-done:
			errs[res.r] = res.err
			if res.closed {
				delete(running, res.r)
			} else {
				running[res.r] = true
			}
		case <-timer.C:
			for r, closing := range running {
				switch {
				case !closing:
					errs[r] = fmt.Errorf("rank %d of %d still running after %v (hang)", r, s.N, hang)
				case errs[r] != nil:
					errs[r] = fmt.Errorf("rank %d of %d still closing after %v (hang), its body failed: %w", r, s.N, hang, errs[r])
				default:
					errs[r] = fmt.Errorf("rank %d of %d still closing after %v (hang)", r, s.N, hang)
				}
			}
			t.Errorf("worldtest: ranks %v of %d still running or closing after %v (hang)", slices.Sorted(maps.Keys(running)), s.N, hang)
			return errs
		}
	}
	return errs
}

// Each runs f on every communicator of cs at once (nil ones skipped) and
// returns the errors by index.
func Each[C comparable](cs []C, f func(r int, c C) error) []error {
	out := make([]error, len(cs))
	var wg sync.WaitGroup
	var none C
	for r, c := range cs {
		if c == none {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); out[r] = f(r, c) }()
	}
	wg.Wait()
	return out
}

// NoErrors fails the test with every rank's error.
func NoErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
