package capi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
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

// progress is a communicator's part in naming withheld collectives.
type progress struct {
	store bootstrap.Store // the world's store; nil: nothing is asked
	key   string          // the communicator's name in the store, the same on every member
	calls uint64          // collectives this rank has started on it (under mu)
	kids  uint64          // splits and shrinks made from it, which name theirs (under mu)
	asked uint64          // the last request seen (under mu)

	mu   sync.Mutex
	busy int           // calls on host buffers in flight
	idle chan struct{} // closed when busy drops to 0
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
}

// childKey is the store name of the next communicator split or shrunk
// from this one; tag tells the children of one split apart (its color).
func (p *progress) childKey(tag string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kids++
	return p.key + "/" + strconv.FormatUint(p.kids, 10) + tag
}

// begin counts a collective this rank starts and returns its number; a
// call on host buffers (host) is in flight until done.
func (p *progress) begin(host bool) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if host {
		if p.busy == 0 {
			p.idle = make(chan struct{})
		}
		p.busy++
	}
	return p.calls
}

// done ends a call on host buffers that begin counted.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy--
	if p.busy == 0 {
		close(p.idle)
	}
}

// settle waits, at most limit, for the calls on host buffers in flight
// to end (and name what was withheld).
func (p *progress) settle(limit time.Duration) {
	p.mu.Lock()
	idle := p.idle
	busy := p.busy
	p.mu.Unlock()
	if busy == 0 {
		return
	}
	select {
	case <-idle:
	case <-time.After(limit):
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
		p.mu.Lock()
		p.asked = max(p.asked, k)
		ans := stallAnswer{Calls: p.calls}
		p.mu.Unlock()
		var req stallRequest
		if json.Unmarshal(b, &req) != nil || req.Rank == c.rank {
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

// nameWithheld adds to err, the end of this rank's collective number seq
// by a timeout or an abort, the members that have not called it.
func (c *Comm) nameWithheld(kind Kind, seq uint64, err error) error {
	if !endedWaiting(err) {
		return err
	}
	behind := c.askBehind(kind, seq)
	if len(behind) == 0 {
		return err
	}
	return fmt.Errorf("%s: %w", strings.Join(behind, "; "), err)
}

// endedWaiting reports whether err ended a call that was waiting: its
// deadline, or an abort (this rank's, or another member's).
func endedWaiting(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, errs.ErrTimeout) || errors.Is(err, errs.ErrAborted)
}

// askBehind asks every other member how many collectives it has called
// and returns, for each one short of seq, what it has not called. Members
// that do not answer within stallWait are not named.
func (c *Comm) askBehind(kind Kind, seq uint64) []string {
	p := &c.prog
	if p.store == nil || c.nranks < 2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stallWait)
	defer cancel()
	name := strings.TrimPrefix(kind.String(), "nccl")
	req, _ := json.Marshal(stallRequest{Rank: c.rank, Call: name, Seq: seq})
	p.mu.Lock()
	k := p.asked + 1
	p.mu.Unlock()
	for tries := 0; ; k, tries = k+1, tries+1 {
		err := p.store.Put(ctx, p.key+"/stall/"+strconv.FormatUint(k, 10), req)
		if err == nil {
			break
		}
		if !errors.Is(err, errs.ErrMismatch) || tries == 64 {
			return nil // the store is gone, or too many others ask at once
		}
	}
	calls := make([]int64, c.nranks)
	var wg sync.WaitGroup
	for r := range c.nranks {
		calls[r] = -1
		if r == c.rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := p.store.Get(ctx, answerKey(p.key, k, r))
			var ans stallAnswer
			if err == nil && json.Unmarshal(b, &ans) == nil {
				calls[r] = int64(ans.Calls)
			}
		}()
	}
	wg.Wait()
	var behind []string
	for r, n := range calls {
		if n >= 0 && uint64(n) < seq {
			last := "none yet"
			if n > 0 {
				last = "#" + strconv.FormatInt(n, 10)
			}
			behind = append(behind, fmt.Sprintf("rank %d has not called %s #%d (its last collective on this communicator: %s)", r, name, seq, last))
		}
	}
	return behind
}
