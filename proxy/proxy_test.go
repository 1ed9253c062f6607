package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/internal/testenv"
)

// fakeLocal adapts a fake network to Local.
type fakeLocal struct {
	nw *fake.Network
	me int
}

func (l fakeLocal) Send(p int, tag fabric.Tag, b []byte) fabric.Request {
	return l.nw.Link(l.me, p).Send(tag, b)
}

// countedLocal is fakeLocal counting the messages sent (by every rank).
type countedLocal struct {
	fakeLocal
	sent *atomic.Int64
}

func (l countedLocal) Send(p int, tag fabric.Tag, b []byte) fabric.Request {
	l.sent.Add(1)
	return l.fakeLocal.Send(p, tag, b)
}
func (l fakeLocal) Recv(p int, tag fabric.Tag, b []byte) fabric.Request {
	return l.nw.Link(l.me, p).Recv(tag, b)
}

// job is hosts × per ranks, each with a proxy on loopback (tcp provider),
// local links over a fake network, and rail-aligned routes: rank s relays
// its message for d through the rank of s's host whose local index is d's
// (as the planner does for hosts without GPUs and one NIC per rank).
type job struct {
	hosts  []string
	nw     *fake.Network
	px     []*Proxy
	via    func(s, d int) int
	sent   atomic.Int64 // local-link messages
	gather bool         // run calls AllToAllvGathered, the relays' messages put in place by the test
}

func railVia(per int) func(s, d int) int { return func(s, d int) int { return s/per*per + d%per } }
func directVia(s, d int) int             { return s }

func newJob(t *testing.T, nhosts, per int, via func(s, d int) int, chunk int) *job {
	t.Helper()
	return newJobOn(t, nhosts, per, via, chunk, openTCP)
}

// openTCP is a rank's provider in the tests: tcp on loopback (device 0).
func openTCP(t *testing.T) (net.Provider, int) {
	t.Helper()
	p, err := tcp.New(tcp.Options{IfName: "lo", Sockets: 1, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, 0
}

// dial connects a process outside the job (a provider of its own) to
// px's listener and returns the connection and the listener's handle: the
// tests then say hello as they like.
func dial(ctx context.Context, t *testing.T, px *Proxy) (net.SendConn, []byte) {
	t.Helper()
	p, dev := openTCP(t)
	h := px.conns.l.Handle()
	sc, err := p.Connect(ctx, dev, h)
	if err != nil {
		t.Fatal(err)
	}
	return sc, h
}

// newJobOn is newJob with each rank's provider (and its device) from open.
func newJobOn(t *testing.T, nhosts, per int, via func(s, d int) int, chunk int, open func(*testing.T) (net.Provider, int)) *job {
	t.Helper()
	n := nhosts * per
	j := &job{hosts: make([]string, n), nw: fake.NewNetwork(n, fake.Options{}), px: make([]*Proxy, n), via: via}
	for r := range n {
		j.hosts[r] = fmt.Sprint("host", r/per)
	}
	stores := bootstrap.NewInProc(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r := range n {
		p, dev := open(t)
		var err error
		j.px[r], err = New(ctx, Config{Rank: r, Hosts: j.hosts, Via: via, Local: countedLocal{fakeLocal{j.nw, r}, &j.sent},
			Provider: p, Dev: dev, Dir: stores[r], Key: "pxn/test/", Chunk: chunk, Credits: 2,
			Auth: Auth{Secret: testSecret, JobID: "job"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(j.px[r].Close)
	}
	return j
}

// payload is rank s's byte i for rank d: the reference both sides compute.
func payload(s, d, i int) byte { return byte(s*31 + d*7 + i*13 + i>>8) }

// lengths[s][d]: how many bytes s sends d.
func unevenLengths(n, maxLen int, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([][]int, n)
	for s := range out {
		out[s] = make([]int, n)
		for d := range out[s] {
			switch rng.IntN(6) {
			case 0:
				out[s][d] = 0
			default:
				out[s][d] = rng.IntN(maxLen + 1)
			}
		}
	}
	return out
}

// run runs one AllToAllv on every rank and checks every byte received.
func (j *job) run(t *testing.T, lens [][]int) []Stats {
	t.Helper()
	n := len(j.hosts)
	stats := make([]Stats, n)
	errs := make([]error, n)
	recvs := make([][][]byte, n)
	sends := make([][][]byte, n)
	for r := range n {
		sends[r], recvs[r] = testenv.AllToAllBuffers(lens, r, payload)
	}
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if !j.gather {
				stats[r], errs[r] = j.px[r].AllToAllv(ctx, sends[r], recvs[r])
				return
			}
			// What the GPU hand-off puts on relay r: its siblings' messages
			// that it carries (copies: the senders' own buffers are not read).
			g := map[[2]int][]byte{}
			for s := range n {
				for d := range n {
					if s != r && j.hosts[s] == j.hosts[r] && j.hosts[d] != j.hosts[r] && j.via(s, d) == r {
						g[[2]int{s, d}] = append([]byte{}, sends[s][d]...)
					}
				}
			}
			stats[r], errs[r] = j.px[r].AllToAllvGathered(ctx, sends[r], recvs[r], g)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range n {
		for s := range n {
			for i, b := range recvs[r][s] {
				if want := payload(s, r, i); b != want {
					t.Fatalf("rank %d: byte %d from rank %d is %d, want %d", r, i, s, b, want)
				}
			}
		}
	}
	return stats
}

func sum(st []Stats) (tot Stats) {
	for i := range st {
		tot.add(&st[i])
	}
	return tot
}

func TestAllToAll(t *testing.T) {
	const hosts, per = 2, 4
	n := hosts * per
	for _, c := range []struct {
		name  string
		via   func(s, d int) int
		chunk int
		lens  [][]int
		// expected totals: cross-host messages sent, of them relayed, receives posted
		messages, relayed, receives int64
	}{
		{"rail even", railVia(per), 1 << 20, testenv.EvenLengths(n, 4096), 32, 24, 8},
		{"direct even", directVia, 1 << 20, testenv.EvenLengths(n, 4096), 32, 0, 32},
		{"rail chunked", railVia(per), 1000, testenv.EvenLengths(n, 2500), 96, 72, 24},
		{"rail uneven", railVia(per), 777, unevenLengths(n, 5000, 1), -1, -1, -1},
		{"direct uneven", directVia, 777, unevenLengths(n, 5000, 2), -1, -1, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := newJob(t, hosts, per, c.via, c.chunk)
			for range 2 { // twice: connections are reused
				tot := sum(j.run(t, c.lens))
				if tot.Received != tot.Messages {
					t.Errorf("%d messages sent, %d received", tot.Messages, tot.Received)
				}
				if c.messages >= 0 && (tot.Messages != c.messages || tot.Relayed != c.relayed || tot.Receives != c.receives) {
					t.Errorf("got %+v, want messages %d relayed %d receives %d", tot, c.messages, c.relayed, c.receives)
				}
				t.Logf("%s", tot)
			}
		})
	}
}

// TestAllToAllGathered: with the relays' messages gathered by the caller
// (the GPU hand-off), the senders hand nothing over the local links, the
// relays send what they were given, and every byte arrives.
func TestAllToAllGathered(t *testing.T) {
	const hosts, per = 2, 4
	n := hosts * per
	for _, c := range []struct {
		name  string
		chunk int
		lens  [][]int
	}{
		{"even", 1 << 20, testenv.EvenLengths(n, 4096)},
		{"chunked uneven", 777, unevenLengths(n, 5000, 3)},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := newJob(t, hosts, per, railVia(per), c.chunk)
			j.gather = true
			var relayed int64
			for s := range n {
				for d := range n {
					if j.hosts[s] != j.hosts[d] && railVia(per)(s, d) != s {
						relayed += int64((c.lens[s][d] + c.chunk - 1) / c.chunk)
					}
				}
			}
			for range 2 {
				tot := sum(j.run(t, c.lens))
				if tot.Gathered != relayed || tot.Relayed != relayed || tot.Received != tot.Messages {
					t.Errorf("got %+v, want %d messages relayed, all gathered, all received", tot, relayed)
				}
			}
			// Only the local peers' blocks crossed the local links: one
			// message per non-empty block between ranks of a host, a call.
			var local int64
			for s := range n {
				for q := range n {
					if s != q && j.hosts[s] == j.hosts[q] && c.lens[s][q] > 0 {
						local += 2
					}
				}
			}
			if got, want := j.sent.Load(), local; got != want {
				t.Errorf("local links carried %d messages, want %d (the local blocks only)", got, want)
			}
		})
	}
}

// TestRankKilled: a rank that dies mid-all-to-all (its proxy aborted, its
// local links gone) fails the call on every other rank within the
// deadline, and the error names a rank.
func TestRankKilled(t *testing.T) {
	const hosts, per = 2, 4
	for _, victim := range []int{1, 6} { // a sender/relay on host0, one on host1
		t.Run(fmt.Sprint("rank", victim), func(t *testing.T) {
			n := hosts * per
			j := newJob(t, hosts, per, railVia(per), 1<<10)
			lens := testenv.EvenLengths(n, 1<<20)
			errs := make([]error, n)
			var wg, started sync.WaitGroup // started: every survivor is about to call
			start := time.Now()
			for r := range n {
				if r == victim {
					continue
				}
				started.Add(1)
				send, recv := make([][]byte, n), make([][]byte, n)
				for d := range n {
					send[d], recv[d] = make([]byte, lens[r][d]), make([]byte, lens[d][r])
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					defer cancel()
					started.Done()
					_, errs[r] = j.px[r].AllToAllv(ctx, send, recv)
				}()
			}
			started.Wait()
			j.px[victim].Abort(fmt.Errorf("rank %d killed", victim))
			j.nw.Kill(victim)
			// The others learn it from their links; the job's bootstrap
			// would abort them all: do that here for ranks that only wait.
			time.AfterFunc(2*time.Second, func() {
				for r := range n {
					j.px[r].Abort(fmt.Errorf("job aborted: rank %d lost", victim))
				}
			})
			wg.Wait()
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			for r, err := range errs {
				if r == victim {
					continue
				}
				if err == nil || !strings.Contains(err.Error(), "rank ") {
					t.Errorf("rank %d: %v, want an error naming a rank", r, err)
				}
			}
		})
	}
}

func TestCredits(t *testing.T) {
	c := NewCredits(2)
	k := CreditKey{1, "b"}
	ctx := context.Background()
	for range 2 {
		if err := c.Acquire(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := c.Acquire(short, k); err == nil {
		t.Fatal("a third credit of 2")
	}
	if err := c.Acquire(ctx, CreditKey{2, "b"}); err != nil {
		t.Fatal("flows share credits:", err)
	}
	c.Release(k)
	if err := c.Acquire(ctx, k); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("rank 3 lost")
	go c.Abort(boom)
	if err := c.Acquire(ctx, k); !errors.Is(err, boom) {
		t.Fatalf("after abort: %v", err)
	}
}

// TestMultiReceiveBatches: 10 local senders share every relay (all of a
// host's ranks relay through the first rank of their host): a relay's
// messages for one destination land in ⌈10/8⌉ = 2 receives (8 + 2 buffers).
func TestMultiReceiveBatches(t *testing.T) {
	const hosts, per = 2, 10
	n := hosts * per
	j := newJob(t, hosts, per, func(s, d int) int { return s / per * per }, 1<<20)
	tot := sum(j.run(t, unevenLengths(n, 3000, 5)))
	if tot.Received != tot.Messages {
		t.Errorf("%d messages sent, %d received", tot.Messages, tot.Received)
	}
	tot = sum(j.run(t, testenv.EvenLengths(n, 1000)))
	if want := int64(n * per); tot.Messages != want || tot.Relayed != want-int64(n) {
		t.Errorf("%+v, want %d messages, %d relayed", tot, want, want-int64(n))
	}
	if tot.Receives != int64(n*2) || tot.Buffers != int64(n*per) {
		t.Errorf("%d receives with %d buffers, want %d with %d", tot.Receives, tot.Buffers, n*2, n*per)
	}
}

// neverReq is a network request that never completes.
type neverReq struct{}

func (neverReq) Test() (bool, []int, error) { return false, nil, nil }
func (neverReq) Wait(ctx context.Context) ([]int, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestEngineAbort: operations in flight and queued fail with the abort's
// reason, later ones at once, and the engine's thread stops.
func TestEngineAbort(t *testing.T) {
	e := NewEngine(3, 1)
	ctx := context.Background()
	var ops []*Op
	for range 5 {
		ops = append(ops, e.Post(ctx, func() (net.Request, error) { return neverReq{}, nil }))
	}
	boom := errors.New("rank 5 lost")
	e.Abort(boom)
	for i, o := range append(ops, e.Post(ctx, func() (net.Request, error) { return neverReq{}, nil })) {
		select {
		case <-o.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("op %d still pending after the abort", i)
		}
		if _, err := o.Wait(ctx); !errors.Is(err, boom) || !strings.Contains(err.Error(), "rank 3 proxy") {
			t.Errorf("op %d: %v, want the abort's reason naming rank 3's proxy", i, err)
		}
	}
	e.Close() // after Abort: nothing more
}

// chanReq completes when done is closed; it counts its Tests and says when
// a watcher waits on it.
type chanReq struct {
	done    chan struct{}
	waiting chan struct{} // closed by the first Wait
	once    sync.Once
	tests   atomic.Int64
}

func (r *chanReq) Test() (bool, []int, error) {
	r.tests.Add(1)
	select {
	case <-r.done:
		return true, []int{7}, nil
	default:
		return false, nil, nil
	}
}

func (r *chanReq) Wait(ctx context.Context) ([]int, error) {
	r.once.Do(func() { close(r.waiting) })
	select {
	case <-r.done:
		return []int{7}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestEngineSleepsIdle: with a request in flight and nothing completing,
// the engine's thread blocks (it tests the request a bounded number of
// times over 50 ms, instead of polling it), and wakes when the request
// completes.
func TestEngineSleepsIdle(t *testing.T) {
	e := NewEngine(0, 1)
	defer e.Close()
	r := &chanReq{done: make(chan struct{}), waiting: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := e.Post(ctx, func() (net.Request, error) { return r, nil })
	select {
	case <-r.waiting: // the engine armed its watcher: it is about to block
	case <-ctx.Done():
		t.Fatal("the engine never waited on the request")
	}
	before := r.tests.Load()
	<-time.After(50 * time.Millisecond) // time for a polling engine to poll
	idle := r.tests.Load() - before
	close(r.done)
	sizes, err := o.Wait(ctx)
	if err != nil || len(sizes) != 1 || sizes[0] != 7 {
		t.Fatalf("op: %v %v, want [7] nil", sizes, err)
	}
	if idle > 2 {
		t.Errorf("the engine tested an idle request %d times in 50 ms, want it blocked (at most 2)", idle)
	}
}

// TestEnginePostAll: a batch is posted in its order, every operation
// completes with its own request's sizes, and an empty batch is nothing.
func TestEnginePostAll(t *testing.T) {
	e := NewEngine(0, 1)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ops := e.PostAll(ctx); len(ops) != 0 {
		t.Fatalf("empty batch: %d ops", len(ops))
	}
	var order []int // appended on the engine's thread only
	reqs := make([]*chanReq, 5)
	starts := make([]func() (net.Request, error), len(reqs))
	for i := range reqs {
		reqs[i] = &chanReq{done: make(chan struct{}), waiting: make(chan struct{})}
		starts[i] = func() (net.Request, error) { order = append(order, i); return reqs[i], nil }
	}
	ops := e.PostAll(ctx, starts...)
	for i := len(reqs) - 1; i >= 0; i-- { // complete them in reverse
		close(reqs[i].done)
		if sizes, err := ops[i].Wait(ctx); err != nil || sizes[0] != 7 {
			t.Fatalf("op %d: %v %v", i, sizes, err)
		}
	}
	if fmt.Sprint(order) != "[0 1 2 3 4]" {
		t.Errorf("posted in the order %v, want 0..4", order)
	}
}
