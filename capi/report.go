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
// (join.DialReporter) at its first report, and says goodbye as soon as
// it has published. A process that never reports never joins, so a healthy
// PyTorch job that exits without tearing NCCL down is not "a rank that
// exited without closing the job".

// jobReport is this process's connection to flexrun's store for reports.
// A rank joins the store at most once, and a rank that leaves it without
// its goodbye (its process exits) fails the job's store for every later
// report: so one sender joins, publishes what is queued, and says goodbye
// as soon as the queue is empty; reports that come later are dropped
// (the first cause is the one that counts).
type jobReport struct {
	mu      sync.Mutex
	state   reportState
	queue   []queuedReport
	sending bool // a sender runs
}

type queuedReport struct {
	e    comm.EndReport
	done chan struct{}
}

type reportState int

const (
	reportIdle reportState = iota // not joined yet
	reportShut                    // said goodbye, or could not join: reports are dropped
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
	// longer than reportWait, and a rank that exits in the middle of its
	// report leaves the store failed for the others' reports.
	callReportWait = 2 * time.Second
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
		log.Debug("report to flexrun dropped: this process has said goodbye to its store", "comm", e.Comm, "error", e.Text)
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

// send joins flexrun's store, publishes the queue until it is empty, and
// says goodbye. The reports are done once the goodbye has left: a
// process that exits with its connection still open fails flexrun's
// store (a rank lost), and the reports of other ranks still on their way
// would be refused.
func (j *jobReport) send(env settings.Env, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), reportDial)
	rep, err := join.DialReporter(ctx, env, log.Named("report"))
	cancel()
	if err != nil {
		log.Debug("cannot report to flexrun", "error", err)
	}
	var sent []chan struct{}
	for {
		j.mu.Lock()
		if len(j.queue) == 0 {
			j.state, j.sending = reportShut, false
			j.mu.Unlock()
			break
		}
		q := j.queue[0]
		j.queue = j.queue[1:]
		j.mu.Unlock()
		if err == nil {
			key, value := comm.EncodeEnd(rep.Rank, q.e)
			ctx, cancel := context.WithTimeout(context.Background(), reportDial)
			perr := rep.Store.Put(ctx, key, value)
			cancel()
			// errs.ErrMismatch: another member's end came first under the
			// key (keys are write-once); flexrun heard this one too.
			if perr != nil && !errors.Is(perr, errs.ErrMismatch) {
				log.Debug("report to flexrun", "comm", q.e.Comm, "error", perr)
			}
		}
		sent = append(sent, q.done)
	}
	if err == nil {
		_ = rep.Store.Close()
	}
	for _, done := range sent {
		close(done)
	}
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
// consequence, never the cause). Timeouts are reportWithheld's; other
// failures are not reported: an abort is the program's own doing (torch
// aborts its communicators at shutdown), and a call that fails on another
// member's end of the communicator says nothing of its own rank (it may
// be the cause, late).
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
