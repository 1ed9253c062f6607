package capi

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/settings"
)

// fakeFlexrun is flexrun's store as flexrun serves it for a job of 2
// ranks, this process being its rank 1: reporters are transient members
// (join.IsReporterHost), as in flexrun; or, older, not (a rank joins
// once). events are the store's, in order.
type fakeFlexrun struct {
	events chan bootstrap.Event
	vars   map[string]string // the environment flexrun gives rank 1
}

func newFakeFlexrun(t *testing.T, transient bool) *fakeFlexrun {
	t.Helper()
	f := &fakeFlexrun{events: make(chan bootstrap.Event, 1024)}
	secret := []byte("0123456789abcdef0123456789abcdef")
	cfg := bootstrap.ServerConfig{Addr: "127.0.0.1:0", Size: 2, Secret: secret, JobID: "job",
		OnEvent: func(ev bootstrap.Event) {
			select {
			case f.events <- ev:
			default: // (more than the tests make)
			}
		}}
	if transient {
		cfg.Transient = join.IsReporterHost
	}
	srv, err := bootstrap.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	f.vars = map[string]string{"FLEXLINK_RANK": "1", "FLEXLINK_WORLD_SIZE": "2", "FLEXLINK_BOOTSTRAP": srv.Addr(),
		"FLEXLINK_JOB_ID": "job", "FLEXLINK_JOB_SECRET": hex.EncodeToString(secret)}
	return f
}

// next is the store's next event, within 10 s.
func (f *fakeFlexrun) next(t *testing.T, what string) bootstrap.Event {
	t.Helper()
	select {
	case ev := <-f.events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no event from flexrun's store within 10 s", what)
		return bootstrap.Event{}
	}
}

// nextEnd skips the store's events up to its next put and returns it as
// a communicator's end.
func (f *fakeFlexrun) nextEnd(t *testing.T, what string) comm.EndReport {
	t.Helper()
	for {
		ev := f.next(t, what)
		if ev.Kind != bootstrap.EventPut {
			continue
		}
		e, ok := comm.DecodeEnd(ev.Key, ev.Value)
		if !ok {
			t.Fatalf("%s: put %q is no communicator's end", what, ev.Key)
		}
		return e
	}
}

// TestReportSessions: a process reports to flexrun in sessions (join,
// put, goodbye), one after another: each report after a goodbye joins
// again, its reports reach the store in order, at most maxReportSessions
// times; an older flexrun, which refuses a rank's second join, hears the
// first report only, and the later ones are dropped without another try.
func TestReportSessions(t *testing.T) {
	report := func(i int) comm.EndReport {
		kind := "timeout"
		if i%2 == 1 {
			kind = "mismatch"
		}
		return comm.EndReport{Comm: "nccl@test/w", Kind: kind, ClosedBy: -1, InCall: fmt.Sprintf("AllReduce #%d", i+1), Text: fmt.Sprintf("report %d", i)}
	}
	for _, tc := range []struct {
		name      string
		transient bool
		reports   int
		heard     int // sessions (and reports) flexrun's store hears
	}{
		{name: "flexrun", transient: true, reports: 3, heard: 3},
		{name: "flexrun, capped", transient: true, reports: maxReportSessions + 2, heard: maxReportSessions},
		{name: "older flexrun", transient: false, reports: 3, heard: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeFlexrun(t, tc.transient)
			env := settings.Map(f.vars)
			var j jobReport
			for i := range tc.reports {
				what := fmt.Sprintf("report %d", i)
				done := j.publish(env, hclog.NewNullLogger(), report(i))
				dropped := i > tc.heard || (i == tc.heard && tc.transient)
				select {
				case <-done:
				default:
					if dropped {
						t.Errorf("%s, to be dropped: publish returned before it was done", what)
					}
				}
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: not done within 10 s", what)
				}
				switch {
				case i < tc.heard:
					// Its own session: joined, put, left.
					for _, want := range []bootstrap.EventKind{bootstrap.EventJoined, bootstrap.EventPut, bootstrap.EventLeft} {
						ev := f.next(t, what)
						if ev.Kind != want || ev.Rank != 1 {
							t.Fatalf("%s: %v event of rank %d (%s), want %v of rank 1", what, ev.Kind, ev.Rank, ev.Text, want)
						}
						if ev.Kind == bootstrap.EventPut {
							got, _ := comm.DecodeEnd(ev.Key, ev.Value)
							if want := report(i); got.Kind != want.Kind || got.InCall != want.InCall || got.Text != want.Text || got.Comm != want.Comm {
								t.Errorf("%s: put %+v, want %+v", what, got, want)
							}
						}
					}
				case i == tc.heard && !tc.transient:
					// The older store refuses the second join.
					if ev := f.next(t, what); ev.Kind != bootstrap.EventRefused || ev.Rank != 1 {
						t.Errorf("%s: %v event of rank %d, want a refused join of rank 1", what, ev.Kind, ev.Rank)
					}
				default:
					// Dropped: no join tried. (The done channel closed before
					// publish returned: nothing was sent.)
					select {
					case ev := <-f.events:
						t.Errorf("%s, dropped: %v event of rank %d", what, ev.Kind, ev.Rank)
					default:
					}
				}
			}
			// The sender ends just after its last report is done.
			var state reportState
			var sessions int
			for deadline := time.Now().Add(10 * time.Second); ; {
				j.mu.Lock()
				sending := j.sending
				state, sessions = j.state, j.sessions
				j.mu.Unlock()
				if !sending {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the sender still runs 10 s after the last report (%d sessions)", sessions)
				}
				<-time.After(time.Millisecond)
			}
			wantSessions, wantState := tc.heard, reportIdle
			if !tc.transient {
				wantSessions++ // the refused one
			}
			if tc.heard < tc.reports {
				wantState = reportShut
			}
			if sessions != wantSessions || state != wantState {
				t.Errorf("sessions %d, state %d; want %d, %d", sessions, state, wantSessions, wantState)
			}
		})
	}
}

// TestReportSessionsWithdrawn: stalls that are withdrawn (a late member:
// a rank that saves a checkpoint while the others wait at a barrier, at
// every epoch) cost no session, neither the stall's nor the withdrawal's:
// after more such pairs than maxReportSessions, each in sessions of its
// own, a failure is still heard; an unwithdrawn stall counts.
func TestReportSessionsWithdrawn(t *testing.T) {
	f := newFakeFlexrun(t, true)
	env := settings.Map(f.vars)
	var j jobReport
	send := func(e comm.EndReport) {
		t.Helper()
		select {
		case <-j.publish(env, hclog.NewNullLogger(), e):
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s: not done within 10 s", e.Kind, e.InCall)
		}
		for _, want := range []bootstrap.EventKind{bootstrap.EventJoined, bootstrap.EventPut, bootstrap.EventLeft} {
			ev := f.next(t, e.Kind+" "+e.InCall)
			if ev.Kind != want {
				t.Fatalf("%s %s: %v event, want %v", e.Kind, e.InCall, ev.Kind, want)
			}
			if ev.Kind == bootstrap.EventPut {
				if got, _ := comm.DecodeEnd(ev.Key, ev.Value); got.Kind != e.Kind || got.InCall != e.InCall {
					t.Fatalf("put %+v, want %s %s", got, e.Kind, e.InCall)
				}
			}
		}
	}
	// counted is the sessions counted once the sender has ended (it
	// counts after the reports are done).
	counted := func() int {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			j.mu.Lock()
			sending, sessions := j.sending, j.sessions
			j.mu.Unlock()
			if !sending {
				return sessions
			}
			if time.Now().After(deadline) {
				t.Fatal("the sender still runs 10 s after the last report")
			}
			<-time.After(time.Millisecond)
		}
	}
	end := func(kind string, i int) comm.EndReport {
		return comm.EndReport{Comm: "nccl@test/w", Kind: kind, ClosedBy: -1, InCall: fmt.Sprintf("AllReduce #%d", i), Text: kind}
	}
	for i := range maxReportSessions + 2 {
		send(end("timeout", i+1))
		counted() // each in a session of its own
		send(end(comm.EndResumed, i+1))
		counted()
	}
	if sessions := counted(); sessions != 0 {
		t.Errorf("%d sessions counted after stalls that were all withdrawn, want 0", sessions)
	}
	send(end("timeout", 100)) // not withdrawn: it counts
	send(end("mismatch", 101))
	if sessions := counted(); sessions != 2 {
		t.Errorf("%d sessions counted after a stall and a mismatch, want 2", sessions)
	}
}
