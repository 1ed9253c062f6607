package launcher

import (
	"slices"
	"time"

	"github.com/flexlink/flexlink/internal/comm/join"
)

// The cause window's evidence: what the bootstrap server reported, the
// ranks that exited 0 but still caused a failure, and when to judge.

// openWindow opens the window in which a failure's evidence is
// collected, unless one is open.
func (s *supervisor) openWindow() {
	if s.pendingC == nil && s.cause == nil {
		s.pendingC = time.After(s.job.CauseGrace)
		s.opened = time.Now()
	}
}

// causePoll is how often a window kept open by causeElsewhere looks again.
const causePoll = 100 * time.Millisecond

// cleanWait bounds how long flexrun waits for the bootstrap server's word
// on a rank that exited 0 (cleanPending).
const cleanWait = 2 * time.Second

// cleanPending reports whether the verdict should wait for the bootstrap
// server's word on a rank that exited 0: every failure so far is a lost
// peer's consequence, and a rank that exited 0 after joining has neither
// said goodbye nor been found lost yet. Its process's sockets closed when
// it exited, so its peers' links and the server see the end together, but
// the server's report can trail a peer's exit on a loaded host; judging
// before it would name the peer, a consequence, as the cause.
func (s *supervisor) cleanPending() bool {
	s.drainReports()
	if len(s.failed) == 0 || s.cause != nil {
		return false
	}
	for _, o := range s.failed {
		if o.kind != endPeerLost && !s.evidence.reporters[o.rank] {
			return false
		}
	}
	for rank := range s.clean {
		if _, lost := s.evidence.lost[rank]; s.evidence.joined[rank] && !s.evidence.left[rank] && !lost {
			return true
		}
	}
	// The rank the failed ranks say ended their communicator is still
	// running: it is on its way out (its exit, with status 0, is the
	// cause: leftWaiting).
	if r, ok := s.evidence.reportedLost(); ok && r < len(s.exited) && !s.exited[r] {
		return true
	}
	return false
}

// awaitClean waits, at most cleanWait, while cleanPending, looking again
// each time the bootstrap server reports something.
func (s *supervisor) awaitClean() {
	limit := time.NewTimer(cleanWait)
	defer limit.Stop()
	for s.cleanPending() {
		select {
		case <-s.reportsReady():
		case <-limit.C:
			return
		}
	}
}

// causeElsewhere reports whether the window should stay open for a cause
// still to come: every rank that failed so far failed because it lost a
// peer, and some rank not ended runs on another host, whose loss (a cut
// network: its agent falls silent) flexrun learns only after
// Remote.AgentTimeout. Naming one of the consequences at once would blame
// a healthy rank. It waits at most the agent timeout and a second past
// the window's opening. It also waits, at most cleanWait past the
// opening, for a rank that exited 0 (cleanPending) and for a rank that
// timed out and has not exited yet (timedOutRunning).
func (s *supervisor) causeElsewhere() bool {
	if time.Since(s.opened) < cleanWait && (s.cleanPending() || s.timedOutRunning()) {
		return true
	}
	if s.remote == nil || time.Since(s.opened) > s.job.Remote.AgentTimeout+time.Second {
		return false
	}
	s.drainReports()
	for _, o := range s.failed {
		if o.kind != endPeerLost && !s.evidence.reporters[o.rank] {
			return false
		}
	}
	for i, rp := range s.ranks {
		if !s.exited[i] && rp.agent != nil {
			return true
		}
	}
	return false
}

// timedOutRunning reports whether a rank that published a timeout (its
// collective's deadline passed) has not exited yet: it is on its way out,
// a consequence to be named with the others, and its exit can trail the
// first failure by more than the window (the rank that serves a C
// library job's store holds its error until the others have asked who is
// behind: capi/holdstore.go). The window waits for it, at most cleanWait
// past its opening.
func (s *supervisor) timedOutRunning() bool {
	s.drainReports()
	for _, e := range s.evidence.ends {
		if e.Kind == "timeout" && e.rank >= 0 && e.rank < len(s.exited) && !s.exited[e.rank] {
			return true
		}
	}
	return false
}

// reportsReady is ready when the bootstrap server has reported something.
func (s *supervisor) reportsReady() <-chan struct{} {
	if s.reports == nil {
		return nil
	}
	return s.reports.ready
}

// drainReports adds what the bootstrap server reported since the last
// look to the evidence. A rank joining after another exited 0 before
// joining dooms the job: that fails it. A reporter's join, goodbye and
// loss are left out (isEvidence).
func (s *supervisor) drainReports() {
	if s.reports == nil {
		return
	}
	for _, r := range s.reports.take() {
		if !isEvidence(r) {
			continue
		}
		s.evidence.add(r)
		if r.Kind != ReportJoined || s.cause != nil {
			continue
		}
		for rank, o := range s.clean {
			if !s.evidence.joined[rank] && !slices.ContainsFunc(s.failed, func(f outcome) bool { return f.rank == rank }) {
				s.endedBeforeJoin(o)
			}
		}
	}
}

// isEvidence reports whether r, a report of the bootstrap server, is
// evidence. A process that joined the store only to publish why its
// communicators ended (flexlink's libnccl in a PyTorch rank: its
// communicators meet elsewhere; join.DialReporter) reports only through
// those ends: that it joined, left or was lost says nothing of the
// program's use of the store (most ranks of such a job never join it, and
// a rank that exits while its report is still open has not "exited
// without closing the job").
func isEvidence(r BootstrapReport) bool {
	return r.Kind == ReportEnd || !join.IsReporterHost(r.Host)
}

// endedBeforeJoin fails the job for o, a rank that exited 0 before it
// joined while others joined: they cannot go on without it.
func (s *supervisor) endedBeforeJoin(o outcome) {
	o.beforeJoin, o.code = true, 1
	o.how += " before joining the job"
	s.failed = append(s.failed, o)
	s.openWindow()
}

// withCleanExits adds to outs the ranks that exited 0 and still caused
// the failure: the server found them lost (their connection ended before
// their goodbye: they exited without closing the job).
func (s *supervisor) withCleanExits(outs []outcome) []outcome {
	for rank, o := range s.clean {
		if slices.ContainsFunc(outs, func(f outcome) bool { return f.rank == rank }) {
			continue
		}
		if _, lost := s.evidence.lost[rank]; lost && !s.evidence.left[rank] {
			o.code = 1
			o.how += " without closing the job (its bootstrap connection ended before its goodbye)"
			outs = append(outs, o)
		}
	}
	for i, o := range outs {
		if s.evidence.anyJoined() && !s.evidence.joined[o.rank] && o.kind != endHost && !o.beforeJoin {
			outs[i].beforeJoin = true
			outs[i].how += " before joining the job"
		}
	}
	return outs
}

// evidenceOfJoins fills in who the ranks are, and, when the program uses
// the job's store, the ranks still running that never joined it and
// whether the bootstrap timeout has passed.
func (s *supervisor) evidenceOfJoins() {
	ev := &s.evidence
	ev.who = make([]outcome, len(s.ranks))
	ev.neverJoined, ev.joinTimeout, ev.running, ev.clean = nil, "", nil, nil
	for _, o := range s.clean {
		ev.clean = append(ev.clean, o)
	}
	slices.SortFunc(ev.clean, func(a, b outcome) int { return a.order - b.order })
	for i, rp := range s.ranks {
		ev.who[i] = outcome{rank: rp.p.Rank, host: rp.p.Host, pid: rp.pid}
		if !s.exited[i] {
			ev.running = append(ev.running, ev.who[i])
		}
		if !s.exited[i] && ev.anyJoined() && !ev.joined[rp.p.Rank] {
			ev.neverJoined = append(ev.neverJoined, ev.who[i])
		}
	}
	if d := s.job.BootstrapTimeout; !s.start.IsZero() && time.Since(s.start) >= d*9/10 {
		ev.joinTimeout = d.String()
	}
}

// logEvidence writes, at DEBUG, what the verdict is judged from.
func (s *supervisor) logEvidence(outs []outcome) {
	if !s.job.Logger.IsDebug() {
		return
	}
	for _, o := range outs {
		s.job.Logger.Debug("judging: end", "rank", o.rank, "how", o.how, "order", o.order)
	}
	for _, e := range s.evidence.ends {
		s.job.Logger.Debug("judging: communicator end", "rank", e.rank, "comm", e.Comm, "kind", e.Kind, "in_call", e.InCall, "echo", e.Echo, "closed_by", e.ClosedBy)
	}
	s.job.Logger.Debug("judging: evidence", "lost", s.evidence.lost, "reporters", s.evidence.reporters, "refused", s.evidence.refused, "joined", len(s.evidence.joined), "running", len(s.evidence.running))
}
