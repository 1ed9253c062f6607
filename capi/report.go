package capi

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

// Under flexrun (flexrun --nccl: a PyTorch job), this library's
// communicators meet on rendezvous of their own, which flexrun does not
// see: without a word from the ranks, flexrun's verdict on a failed job
// has only the order in which the processes ended, and names the first
// rank that gave up waiting, a healthy one. So a process that flexrun
// started (FLEXLINK_RANK and FLEXLINK_BOOTSTRAP in its environment) tells
// flexrun's store why a communicator ended, in the form flexlink's own
// ranks do (comm.EncodeEnd): it joins the store as a reporter
// (join.DialReporter) when it has something to report, and says goodbye
// as soon as it has published. A process that never reports never joins,
// so a healthy PyTorch job that exits without tearing NCCL down is not "a
// rank that exited without closing the job".

// jobReport is this process's connection to flexrun's store for reports.
// flexrun's store takes a reporter as a transient member: it may join
// again after its goodbye, and its loss (its process exits mid-report)
// ends only its own session. So a sender joins, publishes what is
// queued, says goodbye as soon as the queue is empty, and a later report
// starts another sender that joins again: a stall reported while the
// call still waits, then that call's end or a later one's. A process
// joins at most maxReportSessions times (a stall that is then withdrawn
// does not count, nor does its withdrawal); after that, or once a join
// has failed (flexrun has gone; or it is older and refuses a rank's
// second join), reports are dropped.
type jobReport struct {
	mu       sync.Mutex
	state    reportState
	queue    []queuedReport
	sending  bool // a sender runs
	sessions int  // joins made (or tried)
}

type queuedReport struct {
	e    comm.EndReport
	done chan struct{}
}

type reportState int

const (
	reportIdle reportState = iota // not joined now: the next report joins
	reportShut                    // no more joins: reports are dropped
)

const (
	// reportDial bounds joining flexrun's store, and each put.
	reportDial = 5 * time.Second
	// reportWait is how long reportWithheld waits for its report to
	// leave: the process may exit as soon as it returns (torch's watchdog
	// ends it after ncclCommAbort), and a report still queued then is
	// lost. Small enough for ncclCommAbort's budget (torch wants it back
	// within 1 s, and asking the members takes up to stallWait).
	reportWait = 300 * time.Millisecond
	// callReportWait is the same for a call that failed (nameWithheld):
	// it has waited out its timeout already, and its rank exits as soon
	// as it returns; on a loaded host joining flexrun's store may take
	// longer than reportWait.
	callReportWait = 2 * time.Second
	// maxReportSessions bounds the joins of one process: each report
	// that finds no sender running joins again (a few per failure: a
	// stall, its withdrawal, the call's end), and a process whose
	// communicators keep failing must not keep knocking.
	maxReportSessions = 8
)

// publish sends e to flexrun's store when this process is one of
// flexrun's ranks; the channel is closed once e has left (or there was
// nothing to do, or it could not be sent: reports are best effort).
func (j *jobReport) publish(env settings.Env, log hclog.Logger, e comm.EndReport) <-chan struct{} {
	done := make(chan struct{})
	if _, ok := join.LauncherRank(env); !ok {
		close(done)
		return done
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state == reportShut {
		log.Debug("report to flexrun dropped: this process joins its store no more", "comm", e.Comm, "kind", e.Kind, "error", e.Text)
		close(done)
		return done
	}
	j.queue = append(j.queue, queuedReport{e: e, done: done})
	if !j.sending {
		j.sending = true
		go j.send(env, log)
	}
	return done
}

// send runs sessions until the queue is empty: each joins flexrun's
// store, publishes what is queued and says goodbye (session). A report
// queued during a goodbye gets a session of its own, after it: one
// process's reports reach the store in the order they were made (the
// judge takes a rank's later report over its earlier timeouts).
func (j *jobReport) send(env settings.Env, log hclog.Logger) {
	for {
		j.mu.Lock()
		j.sessions++
		j.mu.Unlock()
		joined, withdrawn, sent := j.session(env, log)
		j.mu.Lock()
		if joined && withdrawn {
			// A stall that resolved (a late member, not a failure: a rank
			// that saves a checkpoint while the others wait at a barrier)
			// costs no session: neither this one, which withdraws it, nor
			// the one that carried it.
			j.sessions = max(0, j.sessions-2)
		}
		if !joined || j.sessions >= maxReportSessions {
			j.state = reportShut
			dropped := j.queue
			j.queue, j.sending = nil, false
			j.mu.Unlock()
			closeAll(sent) // after the state: a report made once these are done is dropped at once
			for _, q := range dropped {
				log.Debug("report to flexrun dropped: this process joins its store no more", "comm", q.e.Comm, "kind", q.e.Kind, "error", q.e.Text)
				close(q.done)
			}
			return
		}
		if len(j.queue) == 0 {
			j.state, j.sending = reportIdle, false
			j.mu.Unlock()
			closeAll(sent)
			return
		}
		j.mu.Unlock()
		closeAll(sent)
	}
}

func closeAll(cs []chan struct{}) {
	for _, c := range cs {
		close(c)
	}
}

// session joins flexrun's store, publishes the queue until it is empty,
// and says goodbye; joined is false when it could not join (what was
// queued is dropped). sent are the done channels of the reports it took,
// for send to close once the goodbye has left and the state says what the
// session's end means: the process may exit then, and a reporter lost
// before its goodbye is told as a loss in flexrun's log. withdrawn says
// that every report it published withdrew a stall (comm.EndResumed).
func (j *jobReport) session(env settings.Env, log hclog.Logger) (joined, withdrawn bool, sent []chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), reportDial)
	rep, err := join.DialReporter(ctx, env, log.Named("report"))
	cancel()
	if err != nil {
		log.Debug("cannot report to flexrun", "error", err)
	}
	withdrawn = true
	for {
		j.mu.Lock()
		if len(j.queue) == 0 {
			j.mu.Unlock()
			break
		}
		q := j.queue[0]
		j.queue = j.queue[1:]
		j.mu.Unlock()
		withdrawn = withdrawn && q.e.Kind == comm.EndResumed
		if err == nil {
			key, value := comm.EncodeEnd(rep.Rank, q.e)
			ctx, cancel := context.WithTimeout(context.Background(), reportDial)
			perr := rep.Store.Put(ctx, key, value)
			cancel()
			// errs.ErrMismatch: an end came first under the key (keys are
			// write-once: another member's, or this rank's earlier
			// report); flexrun heard this one too.
			if perr != nil && !errors.Is(perr, errs.ErrMismatch) {
				log.Debug("report to flexrun", "comm", q.e.Comm, "error", perr)
			}
		}
		sent = append(sent, q.done)
	}
	if err == nil {
		_ = rep.Store.Close()
	}
	return err == nil, withdrawn && len(sent) > 0, sent
}

// reportEnd publishes e to flexrun (when under flexrun) and waits at most
// wait for it to leave.
func (c *Comm) reportEnd(e comm.EndReport, wait time.Duration) {
	e.Comm = c.reportName()
	e.ClosedBy = -1
	if e.Members == nil {
		e.Members = c.prog.jobMembers()
	}
	limit := time.NewTimer(wait)
	defer limit.Stop()
	select {
	case <-c.lib.ids.report.publish(c.lib.env, c.lib.log, e):
	case <-limit.C:
	}
}

// reportName names the communicator to flexrun, the same on every member
// and apart from every other communicator of the job: its rendezvous'
// address (one per ncclUniqueId) and its place among the communicators
// split or shrunk from it.
func (c *Comm) reportName() string {
	addr := "?"
	if c.fam != nil {
		addr = c.fam.served.addr
	}
	return "nccl@" + addr + "/" + c.prog.key
}

// reportFailed tells flexrun that this rank's collective number seq
// failed on a collective mismatch (the words name both calls: flexrun's
// verdict quotes them) or on a lost member (this rank is then a
// consequence, never the cause). Timeouts are reportWithheld's, and a
// call that waited in the call when another member ended the
// communicator is nameWithheld's (it names that member, or the members
// behind); other failures are not reported: this rank's own abort is the
// program's doing (torch aborts its communicators at shutdown).
func (c *Comm) reportFailed(seq uint64, err error) {
	kind := ""
	switch {
	case errors.Is(err, errs.ErrMismatch):
		kind = "mismatch"
	case errors.Is(err, errs.ErrPeerLost):
		kind = "peer-lost"
	default:
		return
	}
	c.reportEnd(comm.EndReport{Kind: kind, Text: err.Error(), InCall: c.prog.callName(seq)}, callReportWait)
}
