package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/internal/errs"
)

// groupJob is a job whose proxies run the group service over hand-off
// links of their own (a second fake network); failed collects what each
// service reported outside a call.
type groupJob struct {
	*job
	hand     *fake.Network
	mu       sync.Mutex
	failed   map[int]error
	reported chan int      // the rank, each time a service reports
	stats    map[int]Stats // the last run's counters, by rank
	// onHand, when set, sees every delivery on hand (fake.Options.OnDeliver).
	onHand atomic.Pointer[func(from, to, n int)]
}

func newGroupJob(t *testing.T, nhosts, per, chunk int) *groupJob {
	t.Helper()
	return newGroupJobOn(t, newJob(t, nhosts, per, railVia(per), chunk))
}

// newGroupJobOn starts the group service on j's proxies.
func newGroupJobOn(t *testing.T, j *job) *groupJob {
	t.Helper()
	g := &groupJob{job: j, failed: map[int]error{}, reported: make(chan int, len(j.px))}
	g.hand = fake.NewNetwork(len(j.px), fake.Options{OnDeliver: func(from, to, n int) {
		if f := g.onHand.Load(); f != nil {
			(*f)(from, to, n)
		}
	}})
	for r, px := range g.px {
		px.Serve(fakeLocal{g.hand, r}, func(err error) {
			g.mu.Lock()
			g.failed[r] = err
			g.mu.Unlock()
			g.reported <- r
		})
	}
	return g
}

// pairs is one group: lens[[2]int{s, d}] lists the lengths of s's
// messages for d, in order.
type pairs map[[2]int][]int

// run runs one Group on every rank that has a message (the others do
// nothing), checks every byte, and returns the errors by rank.
func (g *groupJob) run(t *testing.T, ms pairs, seed int) map[int]error {
	t.Helper()
	sends, recvs := map[int][]Msg{}, map[int][]Msg{}
	for k, ls := range ms {
		s, d := k[0], k[1]
		for i, l := range ls {
			b := make([]byte, l)
			for j := range b {
				b[j] = payload(s, d, j+i*7+seed)
			}
			sends[s] = append(sends[s], Msg{Peer: d, Buf: b})
			recvs[d] = append(recvs[d], Msg{Peer: s, Buf: make([]byte, l)})
		}
	}
	out := map[int]error{}
	g.stats = map[int]Stats{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r := range g.px {
		if len(sends[r])+len(recvs[r]) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			st, err := g.px[r].Group(ctx, sends[r], recvs[r])
			mu.Lock()
			out[r], g.stats[r] = err, st
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Messages from one sender arrive in its order: the i-th receive from
	// s holds s's i-th message for r.
	for r, rs := range recvs {
		if out[r] != nil {
			continue
		}
		nth := map[int]int{}
		for _, m := range rs {
			i := nth[m.Peer]
			nth[m.Peer]++
			for j, b := range m.Buf {
				if want := payload(m.Peer, r, j+i*7+seed); b != want {
					t.Fatalf("rank %d: byte %d of message %d from rank %d is %d, want %d", r, j, i, m.Peer, b, want)
				}
			}
		}
	}
	return out
}

// relayedPairs is every (s, d) on different hosts (through a relay, or
// the sender's own stream when it is on d's rail), with random lengths:
// 1–3 messages each, some empty.
func (g *groupJob) relayedPairs(maxLen int, seed uint64) pairs {
	rng := rand.New(rand.NewPCG(seed, 3))
	out := pairs{}
	for s := range g.px {
		for d := range g.px {
			if g.px[s].Proxied(s, d) {
				for range 1 + rng.IntN(3) {
					out[[2]int{s, d}] = append(out[[2]int{s, d}], rng.IntN(maxLen+1)*min(rng.IntN(6), 1))
				}
			}
		}
	}
	return out
}

// wantReceives is the multi-receives (and buffers in them) the
// destinations of ms should post: per destination and relay, round k
// takes chunk k of every sender that has one (an empty message is one
// chunk), at most maxRecvs per receive.
func wantReceives(ms pairs, chunk, maxRecvs int, via func(s, d int) int) (receives, buffers int64) {
	type dv struct{ d, v int }
	chunks := map[dv][]int{}
	for k, ls := range ms {
		n := 0
		for _, l := range ls {
			n += max(1, (l+chunk-1)/chunk)
		}
		key := dv{k[1], via(k[0], k[1])}
		chunks[key] = append(chunks[key], n)
		buffers += int64(n)
	}
	for _, cs := range chunks {
		for k := 0; ; k++ {
			m := 0
			for _, c := range cs {
				if c > k {
					m++
				}
			}
			if m == 0 {
				break
			}
			receives += int64((m + maxRecvs - 1) / maxRecvs)
		}
	}
	return receives, buffers
}

func noErrs(t *testing.T, errs map[int]error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestGroup: 2 hosts × 4 ranks, routes to the destination's rail; groups
// of every relayed pair with uneven lengths (several chunks, empty
// messages, several messages per pair), then a group where only a few
// pairs talk and their relays are in no group; every byte checked, and
// the relays' counters show what they carried.
func TestGroup(t *testing.T) {
	const chunk = 1 << 10
	g := newGroupJob(t, 2, 4, chunk)
	for seed := range 2 {
		ms := g.relayedPairs(5000, uint64(seed))
		noErrs(t, g.run(t, ms, seed))
		var got, want [2]int64 // receives, buffers
		for d, st := range g.stats {
			got[0] += st.Receives
			got[1] += st.Buffers
			if st.Received != st.Buffers {
				t.Errorf("rank %d: %d messages received in %d buffers", d, st.Received, st.Buffers)
			}
		}
		want[0], want[1] = wantReceives(ms, chunk, g.px[0].cfg.MaxRecvs, g.px[0].cfg.Via)
		if got != want {
			t.Errorf("seed %d: %d receives of %d buffers, want %d of %d", seed, got[0], got[1], want[0], want[1])
		}
		t.Logf("seed %d: %d receives of %d buffers", seed, got[0], got[1])
		if got[1] < 2*got[0] {
			t.Errorf("seed %d: %.2f buffers per receive, want at least 2 (4 senders share each stream)", seed, float64(got[1])/float64(got[0]))
		}
	}
	// An all-to-all as one group of equal messages: each destination takes
	// the 4 senders of the other host (one stream) 4 chunks a receive.
	even := pairs{}
	for s := range g.px {
		for d := range g.px {
			if g.px[s].Proxied(s, d) {
				even[[2]int{s, d}] = []int{3000}
			}
		}
	}
	noErrs(t, g.run(t, even, 9))
	for d, st := range g.stats {
		if st.Receives != 3 || st.Buffers != 12 || st.Received != 12 {
			t.Errorf("rank %d: %d chunks received in %d receives of %d buffers, want 12 in 3 of 12", d, st.Received, st.Receives, st.Buffers)
		}
	}
	// 0 -> 5 via 1, 6 -> 3 via 7, 2 -> 4 via 0: relays 1 and 7 idle.
	noErrs(t, g.run(t, pairs{{0, 5}: {3000, 10}, {6, 3}: {1 << 12}, {2, 4}: {0}}, 5))
	var relayed int64
	for r, px := range g.px {
		st := px.Totals()
		relayed += st.Relayed
		if st.Relayed == 0 { // every rank is the relay to its rail
			t.Errorf("rank %d relayed nothing: %s", r, st)
		}
	}
	if relayed == 0 {
		t.Error("nothing relayed")
	}
	if len(g.failed) != 0 {
		t.Errorf("services failed: %v", g.failed)
	}
}

// TestGroupCredits: a destination that takes its messages late holds
// back only its own flow: rank 0 sends rank 5 (via rank 1) more than the
// credits allow and, in the same group, rank 6 (via rank 2); rank 6
// receives at once, rank 5 only after rank 6 is done.
func TestGroupCredits(t *testing.T) {
	g := newGroupJob(t, 2, 4, 1<<10)
	big, small := make([]byte, 16<<10), make([]byte, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make([]error, 3)
	got6 := make(chan struct{})
	wg.Add(3)
	go func() {
		defer wg.Done()
		_, errc[0] = g.px[0].Group(ctx, []Msg{{5, big}, {6, small}}, nil)
	}()
	go func() {
		defer wg.Done()
		defer close(got6)
		_, errc[1] = g.px[6].Group(ctx, nil, []Msg{{0, make([]byte, len(small))}})
	}()
	go func() {
		defer wg.Done()
		<-got6
		_, errc[2] = g.px[5].Group(ctx, nil, []Msg{{0, make([]byte, len(big))}})
	}()
	wg.Wait()
	for i, err := range errc {
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
}

// TestGroupMismatch: a receive of another length than the message fails
// with ErrMismatch naming both ranks (the relay compares the lengths and
// sends a mark the receive cannot take), shorter and longer, empty either
// way, a message behind another; the relay's own report names both
// lengths.
func TestGroupMismatch(t *testing.T) {
	for _, c := range []struct{ send, recv []int }{
		{[]int{3000, 10}, []int{2000, 10}},
		{[]int{100, 10}, []int{1<<19 + 100, 10}},
		{[]int{10}, []int{0}},
		{[]int{0}, []int{10}},
		{[]int{500, 3000}, []int{500, 3001}},
	} {
		t.Run(fmt.Sprint(c.send, "-", c.recv), func(t *testing.T) {
			g := newGroupJob(t, 2, 4, 1<<10)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			var sends, recvs []Msg
			for i := range c.send {
				sends = append(sends, Msg{5, make([]byte, c.send[i])})
				recvs = append(recvs, Msg{0, make([]byte, c.recv[i])})
			}
			go func() {
				_, err := g.px[0].Group(ctx, sends, nil)
				done <- err
			}()
			_, err := g.px[5].Group(ctx, nil, recvs)
			if !errors.Is(err, errs.ErrMismatch) || !strings.Contains(err.Error(), "rank 5") || !strings.Contains(err.Error(), "from rank 0") {
				t.Fatalf("receive: %v, want ErrMismatch naming ranks 5 and 0", err)
			}
			t.Log(err)
			select {
			case <-g.reported:
			case <-ctx.Done():
				t.Fatal("the relay did not report the mismatch")
			}
			g.mu.Lock()
			report := g.failed[1]
			g.mu.Unlock()
			if !errors.Is(report, errs.ErrMismatch) || !strings.Contains(report.Error(), "rank 1 relay") {
				t.Errorf("relay rank 1 reported %v, want its mismatch", report)
			}
			g.px[0].Abort(fmt.Errorf("job aborted by rank 5: %w", err)) // the job's end, as the bootstrap would
			<-done
		})
	}
}

// TestGroupRelayKilled: the relay of a pair dies between two groups; the
// sender's service reports it outside any call (so the job ends), and the
// next group of that pair fails on both ends within the deadline naming
// the relay. A rank that is closing (Quiesce) takes the link's end
// quietly and goes on.
func TestGroupRelayKilled(t *testing.T) {
	g := newGroupJob(t, 2, 4, 1<<10)
	noErrs(t, g.run(t, pairs{{0, 5}: {5000}, {2, 7}: {3000}}, 1))
	const victim = 1  // relay of 0 -> 5
	g.px[2].Quiesce() // ranks 2, 3 are closing: rank 1's link ending is no failure to them
	g.px[3].Quiesce()
	g.px[victim].Abort(fmt.Errorf("rank %d killed", victim))
	g.hand.Kill(victim)
	g.nw.Kill(victim)
	deadline := time.After(5 * time.Second)
	for r := -1; r != 0; { // until rank 0 reported
		select {
		case r = <-g.reported:
		case <-deadline:
			t.Fatal("rank 0's service did not report the relay's death")
		}
	}
	g.mu.Lock()
	err := g.failed[0]
	g.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "local rank 1") {
		t.Errorf("rank 0's service reported %v, want the hand-off link to rank 1", err)
	}
	start := time.Now()
	got := g.run(t, pairs{{0, 5}: {5000}}, 2)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	for _, r := range []int{0, 5} {
		if err := got[r]; err == nil || !strings.Contains(err.Error(), fmt.Sprint("rank ", victim)) {
			t.Errorf("rank %d: %v, want an error naming rank %d", r, err, victim)
		}
	}
	noErrs(t, g.run(t, pairs{{2, 7}: {4000}}, 3)) // through rank 3: their services go on
}

// TestGroupDestinationKilled: the destination dies (before the relay
// reached it, or once it is taking the message and part of it went
// through the relay); the relay's service reports it outside any call
// naming the destination, and the job's end (here: every proxy aborted
// with that report, as the bootstrap does) fails the sender's pending
// group (more than the credits cover) with the ranks named.
func TestGroupDestinationKilled(t *testing.T) {
	const victim = 5 // 0 -> 5 through rank 1
	for _, during := range []bool{false, true} {
		t.Run(fmt.Sprint("during=", during), func(t *testing.T) {
			g := newGroupJob(t, 2, 4, 1<<10)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			kill := func() {
				g.px[victim].Abort(fmt.Errorf("rank %d killed", victim))
				g.hand.Kill(victim)
				g.nw.Kill(victim)
			}
			msg := make([]byte, 64<<10)
			// During: the hand-off to the relay stops after 8 KiB until
			// the kill, so the message cannot go through first.
			held, release := make(chan struct{}), make(chan struct{})
			var handed atomic.Int64
			hold := func(from, to, n int) {
				if from != 0 || to != 1 {
					return
				}
				if v := handed.Add(int64(n)); v >= 8<<10 && v-int64(n) < 8<<10 { // this delivery crossed 8 KiB
					close(held)
					<-release
				}
			}
			if !during {
				kill()
			} else {
				g.onHand.Store(&hold)
				defer func() {
					select {
					case <-release:
					default:
						close(release)
					}
				}()
				go g.px[victim].Group(ctx, nil, []Msg{{0, make([]byte, len(msg))}})
			}
			done := make(chan error, 1)
			go func() {
				_, err := g.px[0].Group(ctx, []Msg{{victim, msg}}, nil)
				done <- err
			}()
			if during { // some of it went through the relay
				select {
				case <-held:
				case <-ctx.Done():
					t.Fatal("the hand-off to the relay never reached 8 KiB")
				}
				for g.px[1].Totals().Relayed < 4 {
					select {
					case <-ctx.Done():
						t.Fatal("nothing relayed")
					case <-time.After(time.Millisecond):
					}
				}
				kill()
				close(release)
			}
			for r := -1; r != 1; { // the victim's siblings report its hand-off links too
				select {
				case r = <-g.reported:
				case <-ctx.Done():
					t.Fatal("the relay did not report the destination's death")
				}
			}
			g.mu.Lock()
			report := g.failed[1]
			g.mu.Unlock()
			if !strings.Contains(report.Error(), "rank 1 relay") || !strings.Contains(report.Error(), fmt.Sprint("rank ", victim)) {
				t.Fatalf("relay rank 1 reported %v, want an error naming rank %d", report, victim)
			}
			t.Log(report)
			for _, px := range g.px {
				px.Abort(fmt.Errorf("job aborted: %w", report))
			}
			if err := <-done; err == nil || !strings.Contains(err.Error(), "relay rank 1") || !strings.Contains(err.Error(), fmt.Sprint("rank ", victim)) {
				t.Errorf("sender: %v, want an error naming relay rank 1 and rank %d", err, victim)
			}
		})
	}
}

// TestGroupMismatchInBatch: a message of another length in a batch of two
// senders fails the destination's multi-receive at once with ErrMismatch
// (the relay's mark is longer than any chunk), though the batch's other
// chunk never comes. Rank 5 takes 10 bytes from each of ranks 0 and 2
// (relay 1) in one receive; rank 0 sends 20.
func TestGroupMismatchInBatch(t *testing.T) {
	g := newGroupJob(t, 2, 4, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A send returns once its chunks are staged at the relay: both are
	// there before rank 5 announces its batch.
	if _, err := g.px[0].Group(ctx, []Msg{{5, make([]byte, 20)}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := g.px[2].Group(ctx, []Msg{{5, make([]byte, 10)}}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := g.px[5].Group(ctx, nil, []Msg{{0, make([]byte, 10)}, {2, make([]byte, 10)}})
	if !errors.Is(err, errs.ErrMismatch) || !strings.Contains(err.Error(), "rank 5") || !strings.Contains(err.Error(), "relay rank 1") {
		t.Fatalf("receive: %v, want ErrMismatch naming rank 5 and relay rank 1", err)
	}
	t.Log(err)
}

// TestGroupChain: a send does not wait for the other senders its
// destination takes in the same rounds (within the credits): rank 5 takes
// 2 chunks from each of ranks 0 and 2 in one group (one stream, relay 1,
// rounds of both); rank 2 sends them, then sends rank 7; rank 7 receives
// that, then sends rank 0; only then does rank 0 receive it and send
// rank 5 its part. Every byte checked.
func TestGroupChain(t *testing.T) {
	g := newGroupJob(t, 2, 4, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fill := func(s, d, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = payload(s, d, i)
		}
		return b
	}
	check := func(s, d int, b []byte) error {
		if want := fill(s, d, len(b)); !bytes.Equal(b, want) {
			return fmt.Errorf("rank %d got other bytes from rank %d", d, s)
		}
		return nil
	}
	const big = 2 << 10
	// relayOn: rank me takes 100 bytes from rank from, then sends n to rank to.
	relayOn := func(from, me, to, n int) error {
		b := make([]byte, 100)
		if _, err := g.px[me].Group(ctx, nil, []Msg{{from, b}}); err != nil {
			return err
		}
		if err := check(from, me, b); err != nil {
			return err
		}
		_, err := g.px[me].Group(ctx, []Msg{{to, fill(me, to, n)}}, nil)
		return err
	}
	steps := map[int]func() error{
		5: func() error {
			a, b := make([]byte, big), make([]byte, big)
			if _, err := g.px[5].Group(ctx, nil, []Msg{{0, a}, {2, b}}); err != nil {
				return err
			}
			return errors.Join(check(0, 5, a), check(2, 5, b))
		},
		2: func() error {
			if _, err := g.px[2].Group(ctx, []Msg{{5, fill(2, 5, big)}}, nil); err != nil {
				return err
			}
			_, err := g.px[2].Group(ctx, []Msg{{7, fill(2, 7, 100)}}, nil)
			return err
		},
		7: func() error { return relayOn(2, 7, 0, 100) },
		0: func() error { return relayOn(7, 0, 5, big) },
	}
	errc := make(chan error, len(steps))
	for r, f := range steps {
		go func() {
			if err := f(); err != nil {
				errc <- fmt.Errorf("rank %d: %w", r, err)
				return
			}
			errc <- nil
		}()
	}
	for range steps {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// TestGroupAfterClose: a group on a closed proxy fails instead of
// reporting sends it would never deliver, own stream or relayed.
func TestGroupAfterClose(t *testing.T) {
	g := newGroupJob(t, 2, 4, 1<<10)
	g.px[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 20 {
		d := 4 + i%2 // 4: rank 0's own stream; 5: through relay 1
		if _, err := g.px[0].Group(ctx, []Msg{{d, make([]byte, 10)}}, nil); err == nil || !strings.Contains(err.Error(), "rank 0") {
			t.Fatalf("group %d after Close: %v, want an error naming rank 0", i, err)
		}
	}
}
