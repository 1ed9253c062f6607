package capi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/errs"
)

// A rank that withholds a collective (a bug in the program, or a rank
// stuck elsewhere) leaves the others waiting in it until their timeout or
// until torch's watchdog aborts the communicator. What they waited for
// ("waiting for recv from rank 1") does not say who is at fault: in a ring
// the rank a member waits on may itself wait on the one that never came.
// So when a call on host buffers ends that way, this rank asks every
// member, through the world's bootstrap store, how many collectives it
// has called on the communicator: a member with fewer than this call's
// number has not called it, and the error says so ("rank 1 has not called
// AllReduce #5"). Members answer from a goroutine that watches the store
// while the communicator lives, so a rank that withholds a call still
// answers.
//
// The store is the world's (shared by its splits and shrinks); requests
// are numbered per communicator (stall/1, stall/2, ...; the first put of
// a number wins, keys being write-once), answers are under the request's
// number and the member's rank.

// progress is a communicator's part in naming withheld collectives. A
// call counts itself with atomics only: the per-call path takes no lock.
type progress struct {
	store bootstrap.Store  // the world's store; nil: nothing is asked
	key   string           // the communicator's name in the store, the same on every member
	calls atomic.Uint64    // collectives this rank has started on it
	kinds [64]atomic.Int32 // the last ones' kinds, by number
	busy  atomic.Int32     // calls on host buffers in flight
	// enq is the last collective this rank enqueued on device buffers
	// (one atomic store per such call): it returned before its work
	// completed, and stays outstanding for watchStalls until every member
	// has made it (stalls_enqueued.go). caught is the last call every
	// member was found to have made (watchStalls' goroutine sets it).
	enq    atomic.Uint64
	caught atomic.Uint64
	now    inCall        // the collective in flight on the caller's thread (stalls.go)
	kids   atomic.Uint64 // splits and shrinks made from it, which name theirs
	asked  atomic.Uint64 // the last request seen
	asks   questions     // the recent requests (holdstore.go)
	// jobs are the members' ranks in flexrun's job, by comm rank (-1:
	// not known), as the members last answered (report.go).
	jobs atomic.Pointer[[]int]
}

// stallWait bounds the question: an abort with a call in flight waits for
// it (torch's watchdog must get its abort back within a second).
const stallWait = 500 * time.Millisecond

type stallRequest struct {
	Rank int    `json:"rank"`
	Call string `json:"call"`
	Seq  uint64 `json:"seq"`
}

type stallAnswer struct {
	Calls uint64 `json:"calls"` // collectives the member has called on the communicator
	// Job is the member's rank in flexrun's job (FLEXLINK_RANK); absent
	// when it was not started by flexrun.
	Job *int `json:"job,omitempty"`
}

// childKey is the store name of the next communicator split or shrunk
// from this one; tag tells the children of one split apart (its color).
func (p *progress) childKey(tag string) string {
	return p.key + "/" + strconv.FormatUint(p.kids.Add(1), 10) + tag
}

// begin counts a collective this rank starts and returns its number; a
// call on host buffers (host) is in flight until done.
func (p *progress) begin(kind Kind, host bool) uint64 {
	if host {
		p.busy.Add(1)
	}
	seq := p.calls.Add(1)
	p.kinds[seq%uint64(len(p.kinds))].Store(int32(kind))
	return seq
}

// latest is the number of the last collective this rank started.
func (p *progress) latest() uint64 { return p.calls.Load() }

// done ends a call on host buffers that begin counted.
func (p *progress) done() { p.busy.Add(-1) }

// settle waits, at most limit, for the calls on host buffers in flight
// to end (and name what was withheld): ncclCommAbort's wait, checked
// every millisecond, so that the calls take no lock to say they are done.
func (p *progress) settle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for p.busy.Load() > 0 && time.Now().Before(deadline) {
		<-time.After(time.Millisecond)
	}
}

// answerStalls answers the members' questions while c lives.
func (c *Comm) answerStalls() {
	p := &c.prog
	for k := uint64(1); ; k++ {
		b, err := p.store.Get(c.ctx, p.key+"/stall/"+strconv.FormatUint(k, 10))
		if err != nil {
			return // c was destroyed, or the store ended
		}
		if k > p.asked.Load() {
			p.asked.Store(k)
		}
		ans := stallAnswer{Calls: p.calls.Load()}
		if jr, ok := join.LauncherRank(c.lib.env); ok {
			ans.Job = &jr
		}
		var req stallRequest
		if json.Unmarshal(b, &req) != nil {
			continue
		}
		p.asks.note(k, req)
		if req.Rank == c.rank {
			continue
		}
		out, _ := json.Marshal(ans)
		ctx, cancel := context.WithTimeout(c.ctx, stallWait)
		_ = p.store.Put(ctx, answerKey(p.key, k, c.rank), out)
		cancel()
	}
}

func answerKey(comm string, k uint64, r int) string {
	return comm + "/stall/" + strconv.FormatUint(k, 10) + "/" + strconv.Itoa(r)
}

// readKey is where the member that put request k says it has read the
// answers (or stopped waiting for them).
func readKey(comm string, k uint64) string {
	return comm + "/stall/" + strconv.FormatUint(k, 10) + "/read"
}

// nameWithheld adds to err, the end of this rank's collective number seq
// by a timeout or an abort, the members that have not called it; and
// tells flexrun (report.go) why the call failed, when that is evidence
// of the cause. The call failed: a stall reported for it stays reported
// (watchStalls withdraws only those of calls that completed).
func (c *Comm) nameWithheld(seq uint64, err error) error {
	c.prog.now.fail(seq)
	c.reportFailed(seq, err)
	if !endedWaiting(err) {
		return err
	}
	calls, asked := c.askCalls(seq, stallWait)
	behind, jobs := c.behindOf(seq, calls, asked)
	if len(behind) == 0 {
		if errors.Is(err, context.DeadlineExceeded) {
			// This rank's own deadline passed in the call, but the members
			// could not say who has not called it (the rendezvous was in
			// a process that has exited): flexrun still hears that this
			// rank waited in it, and names the members that said nothing.
			// (A call that failed on another member's end of the
			// communicator is no evidence of waiting: its rank may be the
			// withholder, late. It says whose end it met, below.)
			c.reportEnd(comm.EndReport{Kind: "timeout", Text: err.Error(), InCall: c.prog.callName(seq)}, callReportWait)
		} else if c.endedByPeer(err) && c.prog.waitingIn(seq) {
			// Another member ended the communicator (ncclCommAbort,
			// ncclCommRevoke) while this rank waited in the call, and
			// nobody was found behind: the words name that member ("ended
			// by rank R"), which flexrun takes for the one that left while
			// the others were in a collective with it (torch aborts a
			// process's communicators as it exits) unless it reported
			// waiting itself (torch's watchdog aborts a waiting rank's
			// communicators at its timeout; it asks first, and reports a
			// member behind: abort.go). This rank is a consequence.
			c.reportEnd(comm.EndReport{Kind: "aborted", Text: err.Error(), InCall: c.prog.callName(seq)}, callReportWait)
		}
		return err
	}
	c.withheldFor(c.prog.callName(seq), behind, jobs, callReportWait)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errs.ErrTimeout) {
		c.holdStore(seq, calls) // not after an abort: see serveGrace
	}
	return fmt.Errorf("%s: %w", strings.Join(behind, "; "), err)
}

// endedByPeer reports whether err is another member's end of the
// communicator by an abort or a revoke (internal/comm: "communicator w
// ended by rank 1 of 3 (world rank 1) on h: ncclCommAbort: aborted"): not
// this rank's own, and not one that names a cause of its own (a lost
// member, a mismatch, a timeout, a close: those are reported as such).
func (c *Comm) endedByPeer(err error) bool {
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded, errs.ErrTimeout, errs.ErrPeerLost, errs.ErrMismatch, errs.ErrClosed} {
		if errors.Is(err, cause) {
			return false
		}
	}
	if !errors.Is(err, errs.ErrAborted) {
		return false
	}
	c.mu.Lock()
	self := c.aborted || c.revoked
	c.mu.Unlock()
	m := endedByWords.FindStringSubmatch(err.Error())
	return !self && m != nil && m[1] != strconv.Itoa(c.rank)
}

// endedByWords finds the member that ended a communicator in its end's
// words (internal/comm's; flexrun's judge reads them alike).
var endedByWords = regexp.MustCompile(`ended by rank (\d+) of \d+ \(world rank \d+\)`)

// waitingIn reports whether call seq was still waiting when it ended:
// in flight on the caller's thread, or enqueued on the GPU and not known
// to be done on every member (an asynchronous error found between calls).
func (p *progress) waitingIn(seq uint64) bool {
	return p.now.seq.Load() == seq || p.enq.Load() == seq && seq > p.caught.Load()
}

// endedWaiting reports whether err ended a call that was waiting: its
// deadline, or an abort (this rank's, or another member's).
func endedWaiting(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, errs.ErrTimeout) || errors.Is(err, errs.ErrAborted)
}

// callName is collective number seq of this rank as the errors name it
// ("AllReduce #5"); "collective #5" once its kind is forgotten.
func (p *progress) callName(seq uint64) string {
	calls := p.calls.Load()
	if seq == 0 || seq > calls || calls-seq >= uint64(len(p.kinds)) {
		return "collective #" + strconv.FormatUint(seq, 10)
	}
	return strings.TrimPrefix(Kind(p.kinds[seq%uint64(len(p.kinds))].Load()).String(), "nccl") + " #" + strconv.FormatUint(seq, 10)
}

// askBehind asks every other member how many collectives it has called
// and returns, for each one short of seq, the first of this rank's calls
// it has not made. Members that do not answer within stallWait are not
// named; and, for each of them whose rank in flexrun's job is known, that
// rank.
func (c *Comm) askBehind(seq uint64) ([]string, []int) {
	calls, jobs := c.askCalls(seq, stallWait)
	return c.behindOf(seq, calls, jobs)
}

// askCalls asks every other member how many collectives it has called
// (this rank's call seq is the question's subject): calls[r] is member
// r's answer (-1: none within wait, or r is this rank), jobs[r] its
// rank in flexrun's job (-1: not known). Both are nil when nothing could
// be asked.
func (c *Comm) askCalls(seq uint64, wait time.Duration) (calls []int64, jobs []int) {
	p := &c.prog
	if p.store == nil || c.nranks < 2 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, _ := json.Marshal(stallRequest{Rank: c.rank, Call: p.callName(seq), Seq: seq})
	k := p.asked.Load() + 1
	for tries := 0; ; k, tries = k+1, tries+1 {
		err := p.store.Put(ctx, p.key+"/stall/"+strconv.FormatUint(k, 10), req)
		if err == nil {
			break
		}
		if !errors.Is(err, errs.ErrMismatch) || tries == 64 {
			return nil, nil // the store is gone, or too many others ask at once
		}
	}
	calls = make([]int64, c.nranks)
	jobs = make([]int, c.nranks)
	var wg sync.WaitGroup
	for r := range c.nranks {
		calls[r], jobs[r] = -1, -1
		if r == c.rank {
			jobs[r], _ = join.LauncherRank(c.lib.env)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := p.store.Get(ctx, answerKey(p.key, k, r))
			var ans stallAnswer
			if err == nil && json.Unmarshal(b, &ans) == nil {
				calls[r] = int64(ans.Calls)
				if ans.Job != nil {
					jobs[r] = *ans.Job
				}
			}
		}()
	}
	wg.Wait()
	p.jobs.Store(&jobs)
	// Say the answers were read: the process serving the store may be
	// waiting for that before it exits (holdStore). Within the question's
	// own bound: an abort's question stays within stallWait.
	_ = p.store.Put(ctx, readKey(p.key, k), []byte{1})
	return calls, jobs
}

// behindOf is askBehind's answer from askCalls' for this rank's call seq.
func (c *Comm) behindOf(seq uint64, calls []int64, jobs []int) ([]string, []int) {
	p := &c.prog
	var behind []string
	var behindJobs []int
	for r, n := range calls {
		if n >= 0 && uint64(n) < seq {
			if jobs[r] >= 0 {
				behindJobs = append(behindJobs, jobs[r])
			}
			last := "none yet"
			if n > 0 {
				last = "#" + strconv.FormatInt(n, 10)
			}
			behind = append(behind, fmt.Sprintf("rank %d has not called %s (its last collective on this communicator: %s)", r, p.callName(uint64(n)+1), last))
		}
	}
	return behind, behindJobs
}

// reportWithheld says that this rank's collective call (callName's words:
// "AllReduce #5") ended waiting for the members in behind (askBehind's
// words, one per member) that have not called it: the text is the
// communicator's last error and the process's (ncclGetLastError), a WARN
// line (silent unless NCCL_DEBUG or FLEXLINK_DEBUG asks for it), and,
// under flexrun, this rank's report of the communicator's end, so that
// flexrun's verdict names the ranks that withheld the call (report.go).
// It waits at most reportWait for the report; c.mu must not be held.
func (c *Comm) reportWithheld(call string, behind []string, jobs []int) {
	c.withheldFor(call, behind, jobs, reportWait)
}

// withheldFor is reportWithheld waiting at most wait for the report;
// jobs are the members behind as ranks of flexrun's job (nil: unknown).
func (c *Comm) withheldFor(call string, behind []string, jobs []int, wait time.Duration) {
	if len(behind) == 0 {
		return
	}
	text := fmt.Sprintf("rank %d of %d: %s did not complete: %s", c.rank, c.nranks, call, strings.Join(behind, "; "))
	c.mu.Lock()
	c.last = text
	c.mu.Unlock()
	c.lib.last.set(text)
	c.lib.log.Warn("collective withheld", "rank", c.rank, "nranks", c.nranks, "call", call, "error", text)
	c.reportEnd(comm.EndReport{Kind: "timeout", Text: text, InCall: call, Behind: jobs}, wait)
}

// jobMembers are the members' ranks in flexrun's job, nil unless every
// member's is known (askBehind learns them).
func (p *progress) jobMembers() []int {
	jobs := p.jobs.Load()
	if jobs == nil || slices.Contains(*jobs, -1) {
		return nil
	}
	return slices.Clone(*jobs)
}
