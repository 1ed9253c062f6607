package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// eventLog collects a server's events.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
	ch  chan struct{} // a value after each event
}

func (l *eventLog) add(ev Event) {
	l.mu.Lock()
	ev.Value = slices.Clone(ev.Value)
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

// waitFor waits (5 s at most) for an event that ok accepts and returns it.
func (l *eventLog) waitFor(t *testing.T, what string, ok func(Event) bool) Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		l.mu.Lock()
		for _, ev := range l.evs {
			if ok(ev) {
				l.mu.Unlock()
				return ev
			}
		}
		l.mu.Unlock()
		select {
		case <-l.ch:
		case <-deadline:
			t.Fatalf("no %s event in 5 s; got %+v", what, l.evs)
		}
	}
}

// TestEvents: the server tells its owner who joined, what ranks put (and
// which put came second), who was refused and why, who left, who was
// lost, and the job's failure.
func TestEvents(t *testing.T) {
	l := &eventLog{ch: make(chan struct{}, 1)}
	srv, _ := testServerCfg(t, ServerConfig{Size: 3, OnEvent: l.add})
	st := dialRanks(t, srv.Addr(), 3, 0, 1)
	for r := range 2 {
		l.waitFor(t, "joined", func(ev Event) bool {
			return ev.Kind == EventJoined && ev.Rank == r && ev.Host == fmt.Sprintf("host-%d", r)
		})
	}
	// A connection claiming rank 2 of a job of 4 is refused, with why.
	if _, err := Dial(ctxFor(t, 5*time.Second), dialCfg(srv.Addr(), 2, 4)); !errors.Is(err, errs.ErrMismatch) {
		t.Fatalf("dial with a wrong size: %v", err)
	}
	l.waitFor(t, "refused", func(ev Event) bool {
		return ev.Kind == EventRefused && ev.Rank == 2 && strings.Contains(ev.Text, "rank 2 says the job has 4 ranks, the server 3")
	})
	st = append(st, dialRanks(t, srv.Addr(), 3, 2)...)
	ctx := ctxFor(t, 5*time.Second)
	if err := st[0].Put(ctx, "k", []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := st[1].Put(ctx, "k", []byte("second")); !errors.Is(err, errs.ErrMismatch) {
		t.Fatalf("second put of k: %v, want a mismatch", err)
	}
	l.waitFor(t, "put", func(ev Event) bool {
		return ev.Kind == EventPut && ev.Rank == 0 && ev.Key == "k" && string(ev.Value) == "first" && !ev.Dup
	})
	l.waitFor(t, "second put", func(ev Event) bool {
		return ev.Kind == EventPut && ev.Rank == 1 && ev.Key == "k" && string(ev.Value) == "second" && ev.Dup
	})
	if err := st[2].Close(); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "left", func(ev Event) bool { return ev.Kind == EventLeft && ev.Rank == 2 })
	// Rank 1's connection ends without a goodbye: lost, and the job fails.
	_ = st[1].(*endpoint).tx.(*tcpClient).pc.conn.Close()
	l.waitFor(t, "lost", func(ev Event) bool {
		return ev.Kind == EventLost && ev.Rank == 1 && ev.Host == "host-1" && ev.Text != ""
	})
	l.waitFor(t, "failed", func(ev Event) bool {
		return ev.Kind == EventFailed && ev.Rank == -1 && errors.Is(ev.Err, errs.ErrPeerLost) && strings.Contains(ev.Text, "rank 1 on host host-1 lost")
	})
	// After the failure a put fails, but the owner still hears of it (a
	// rank's word on its communicator's end, sent as it learns of
	// another's): rank 0 once it knows the job failed, and not kept.
	<-st[0].Done()
	if err := st[0].Put(ctx, "after", []byte("late word")); !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("put after the failure: %v, want the job's failure", err)
	}
	l.waitFor(t, "put after the failure", func(ev Event) bool {
		return ev.Kind == EventPut && ev.Rank == 0 && ev.Key == "after" && string(ev.Value) == "late word" && !ev.Dup
	})
	if _, err := st[0].Get(ctx, "after"); !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("get after the failure: %v, want the job's failure", err)
	}
}

// TestRefusalSummary: a flood of refused connections gives one WARN at
// once and one counted WARN when the interval ends (internal/auth.Drops;
// each one at DEBUG), not a WARN line per connection.
func TestRefusalSummary(t *testing.T) {
	srv, lw := testServer(t, 2, 0)
	srv.drops.Every = 500 * time.Millisecond // shorter than refusalInterval: the test waits for it
	const flood = 20
	for range flood {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n")) // not a hello
		_ = c.Close()
	}
	lw.waitCount(t, 5*time.Second, flood, "[DEBUG]", "dropped connection", "during handshake")
	lw.waitCount(t, 5*time.Second, 1, "[WARN]", "did not prove the job secret", fmt.Sprintf("dropped=%d", flood-1))
	if n := lw.count("[WARN]"); n != 2 {
		t.Errorf("%d WARN lines for %d refused connections, want 2:\n%s", n, flood, strings.Join(lw.lines, "\n"))
	}
}

// TestPutAfterFailureToldBeforeItReturns: a put made once the job has
// failed returns only after the server has told its owner of it (the
// server answers it then). A rank prints its error and exits right after
// that put: had it returned once the put left the process, the exit
// could reset the connection before the server read it, and the
// launcher would never hear how the rank's communicator ended (seen in
// CI: flexrun then named a rank that timed out as the job's cause, not
// the rank that withheld the call).
func TestPutAfterFailureToldBeforeItReturns(t *testing.T) {
	l := &eventLog{ch: make(chan struct{}, 1)}
	srv, _ := testServerCfg(t, ServerConfig{Size: 2, OnEvent: l.add})
	st := dialRanks(t, srv.Addr(), 2, 0, 1)
	if err := st[1].Abort(fmt.Errorf("rank 1 gives up: %w", errs.ErrTimeout)); err != nil {
		t.Fatal(err)
	}
	<-st[0].Done()
	ctx := ctxFor(t, 5*time.Second)
	for i := range 20 {
		key := fmt.Sprintf("end/%d", i)
		if err := st[0].Put(ctx, key, []byte("word")); !errors.Is(err, errs.ErrTimeout) {
			t.Fatalf("put after the failure: %v, want the job's failure", err)
		}
		l.mu.Lock()
		told := slices.ContainsFunc(l.evs, func(ev Event) bool { return ev.Kind == EventPut && ev.Rank == 0 && ev.Key == key })
		l.mu.Unlock()
		if !told {
			t.Fatalf("put %d returned before the server told its owner of it", i)
		}
	}
}

// TestPutAfterLongFailure: the answer to a put made after the job failed
// carries the failure's words, cut to what a reply may hold: a failure of
// the longest text an abort may carry does not make the answer malformed
// (the rank's connection would then end, and the server would report it
// lost).
func TestPutAfterLongFailure(t *testing.T) {
	l := &eventLog{ch: make(chan struct{}, 1)}
	srv, _ := testServerCfg(t, ServerConfig{Size: 2, OnEvent: l.add})
	st := dialRanks(t, srv.Addr(), 2, 0, 1)
	if err := st[1].Abort(errors.New(strings.Repeat("x", maxTextLen))); err != nil {
		t.Fatal(err)
	}
	<-st[0].Done()
	ctx := ctxFor(t, 5*time.Second)
	for i := range 3 {
		if err := st[0].Put(ctx, fmt.Sprintf("end/%d", i), []byte("word")); !errors.Is(err, errs.ErrAborted) {
			t.Fatalf("put after the failure: %v, want the job's failure", err)
		}
	}
	l.waitFor(t, "the last put", func(ev Event) bool { return ev.Kind == EventPut && ev.Key == "end/2" })
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.evs {
		if ev.Kind == EventLost {
			t.Fatalf("rank %d reported lost after its puts: %s", ev.Rank, ev.Text)
		}
	}
}
