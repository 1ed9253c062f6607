package launcher

import (
	"slices"
	"strings"
	"sync"

	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/errs"
)

// ReportKind says what a BootstrapReport is about.
type ReportKind int

// The kinds of BootstrapReport.
const (
	// ReportAbort: Rank aborted the job because it had lost a peer; it
	// failed because of another rank and is not the cause.
	ReportAbort   ReportKind = iota
	ReportLost               // the server found Rank gone (connection ended before its goodbye, or silent)
	ReportJoined             // Rank joined the job's store
	ReportLeft               // Rank said goodbye (closed its world communicator)
	ReportRefused            // a connection claiming Rank was refused; Text says why
	ReportEnd                // Rank published why one of its communicators ended (End)
)

// BootstrapReport is what a bootstrap server tells the launcher about the
// job, to help name a failure's cause.
type BootstrapReport struct {
	Kind ReportKind
	Rank int
	Host string
	Text string   // ReportLost: how; ReportRefused: why
	End  *CommEnd // ReportEnd
}

// CommEnd is a communicator's end as one of its members published it.
type CommEnd struct {
	Comm string // the communicator's name
	// Kind is mismatch, peer-lost, timeout, closed, not-supported,
	// aborted; or EndResumed. A member may report on one communicator
	// more than once: its later report replaces its earlier timeouts
	// there (evidence.supersede).
	Kind string
	Text string // the member's error
	// ClosedBy is the world rank that closed the communicator while the
	// reporting member was in a later collective; -1 for every other end.
	// ClosedCalls is the collectives it made.
	ClosedBy    int
	ClosedCalls uint64
	// InCall is the collective the member was in ("allreduce #7"; "":
	// none or not said).
	InCall string
	// Members are the communicator's world ranks (nil: not said).
	Members []int
	// Behind are the world ranks the member found had not called InCall
	// when it gave up (nil: not asked): the withholders, by their peers'
	// own count of calls.
	Behind []int
	// Echo: the member repeats an end another member published (it failed
	// because of it): evidence of who failed on it, never its origin.
	Echo bool
	// Dup: another member's reason was published first (this one was
	// refused: the reason is write-once), still evidence of what this
	// member saw.
	Dup bool
}

// EndResumed is the Kind of a member's report that a collective it had
// reported as waiting (a "timeout" for InCall, sent while the call still
// waited) has completed: it withdraws that report and is no end itself.
const EndResumed = comm.EndResumed

// reportLedger collects a bootstrap server's reports without ever
// dropping one (a lost "joined" would make a healthy rank look like one
// that never joined): the server's goroutines add, the supervisor takes.
type reportLedger struct {
	mu      sync.Mutex
	pending []BootstrapReport
	ready   chan struct{} // has a value while pending is not empty
}

func newReportLedger() *reportLedger { return &reportLedger{ready: make(chan struct{}, 1)} }

// add records r; it never blocks.
func (l *reportLedger) add(r BootstrapReport) {
	l.mu.Lock()
	l.pending = append(l.pending, r)
	l.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// take returns the reports added since the last take.
func (l *reportLedger) take() []BootstrapReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.pending
	l.pending = nil
	return out
}

// evidence is what the bootstrap server said about the job.
type evidence struct {
	reporters map[int]bool   // ranks that aborted the job because they lost a peer
	lostFirst *int           // the first rank the bootstrap server itself found lost
	lost      map[int]string // every rank the server found lost: how
	joined    map[int]bool   // ranks that joined the store
	left      map[int]bool   // ranks that said goodbye
	refused   map[int]string // ranks refused at the handshake: why (the first)
	ends      []endReport    // communicators' ends as members published them, in order

	// Filled by the supervisor when it judges: ranks still running that
	// never joined while others did, and whether the failure came once
	// the bootstrap timeout had passed (so they are the likely cause).
	neverJoined []outcome
	joinTimeout string    // the bootstrap timeout, when it had passed
	running     []outcome // ranks not ended (and not stopped) when judged
	// who is every rank's identity (rank, host, pid), by rank: a cause
	// may be a rank that has not failed (a closer that exited 0).
	who []outcome
	// clean are the ranks that exited with status 0, in the order seen:
	// one may have left while the others waited for it (leftWaiting).
	clean []outcome
}

// endReport is a CommEnd and the rank that published it.
type endReport struct {
	rank int
	CommEnd
}

func (e *evidence) add(r BootstrapReport) {
	switch r.Kind {
	case ReportLost:
		if e.lostFirst == nil {
			e.lostFirst = &r.Rank
		}
		setMap(&e.lost, r.Rank, r.Text)
	case ReportAbort:
		setMap(&e.reporters, r.Rank, true)
	case ReportJoined:
		setMap(&e.joined, r.Rank, true)
	case ReportLeft:
		setMap(&e.left, r.Rank, true)
	case ReportRefused:
		if _, ok := e.refused[r.Rank]; !ok && r.Rank >= 0 {
			setMap(&e.refused, r.Rank, r.Text)
		}
	case ReportEnd:
		if r.End != nil {
			e.supersede(r.Rank, *r.End)
			if r.End.Kind == EndResumed {
				break
			}
			e.ends = append(e.ends, endReport{rank: r.Rank, CommEnd: *r.End})
			if r.End.Kind == "peer-lost" {
				// It says it failed because a peer was lost: a
				// consequence, whatever status it then exits with.
				setMap(&e.reporters, r.Rank, true)
			}
		}
	}
}

// supersede drops what rank reported earlier about waiting in a
// collective of communicator later.Comm (its "timeout" ends), now that it
// reports again there (later). One process may report several times (a
// libnccl rank reports a call that has waited long, while it still
// waits, and reports again when that call, or a later one, fails): its
// later word is what it knows now. A stall it reported for a call that
// then completed (it went on to a later call, or said EndResumed) is
// no evidence of a withheld call; a mismatch it then met is the more
// specific cause.
//
// A lost peer (or an abort) in the same call is not: the call never
// completed, and the members it waited for are still the ones that kept
// it waiting; the rank that left it, whose end the others met as a lost
// peer, is most often the very rank they found behind (it withheld the
// call, then exited). Both reports are kept: together they say that the
// rank named behind left while the others were in the call (leftWaiting).
func (e *evidence) supersede(rank int, later CommEnd) {
	e.ends = slices.DeleteFunc(e.ends, func(x endReport) bool {
		if x.rank != rank || x.Comm != later.Comm || x.Kind != "timeout" {
			return false
		}
		stillWaiting := later.InCall != "" && later.InCall == x.InCall && (later.Kind == "peer-lost" || later.Kind == "aborted")
		return !stillWaiting
	})
}

func setMap[V any](m *map[int]V, k int, v V) {
	if *m == nil {
		*m = map[int]V{}
	}
	(*m)[k] = v
}

// anyJoined reports whether some rank joined the store: the program uses
// flexlink, so every rank must join.
func (e *evidence) anyJoined() bool { return len(e.joined) > 0 }

// mismatch returns the first end a member published as a mismatch,
// preferring words that name both calls (a link may see only that a
// message's size differs; the member that compared the headers says what
// each rank called, maybe only in its echo of the first member's end,
// after "local error:"). Text is then cut to those words.
func (e *evidence) mismatch() (endReport, bool) {
	var first *endReport
	for i, r := range e.ends {
		if r.Kind != "mismatch" {
			continue
		}
		if r.ClosedBy >= 0 && !r.Echo {
			return r, true
		}
		if j := strings.Index(r.Text, mismatchNamesBoth); j >= 0 {
			r.Text = balanced(r.Text[j+len(errs.ErrMismatch.Error())+2:])
			return r, true
		}
		if first == nil && !r.Echo {
			first = &e.ends[i]
		}
	}
	if first != nil {
		return *first, true
	}
	return endReport{}, false
}

// balanced drops the closing parentheses at the end of s that close
// nothing in it (words cut out of "a (local error: b)").
func balanced(s string) string {
	depth := 0
	for _, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		}
	}
	for depth < 0 && strings.HasSuffix(s, ")") {
		s = s[:len(s)-1]
		depth++
	}
	return s
}

// mismatchNamesBoth is in the words of a mismatch that names both calls
// ("collective mismatch: rank 0 called allreduce ..., rank 1 called ...").
var mismatchNamesBoth = errs.ErrMismatch.Error() + ": rank "
