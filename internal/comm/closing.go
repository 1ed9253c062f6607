package comm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/internal/errs"
)

// A member that closes a communicator while the others are still in a
// collective on it made one call fewer than they did: its links stay up
// while it waits in Close's barrier, so without a word the others would
// wait for it until their deadline, and then blame it as lost. So the
// first member to close publishes that it closed and after how many
// collectives (a close record, under the communicator's close key), and
// every member watches that key while the communicator is open: a member
// inside a collective numbered past the closer's count can never complete
// it, and ends the communicator at once with errs.ErrMismatch naming the
// closer and the call (fate.go publishes it for everyone, and the closer's
// barrier ends with it).
//
// Counting is exact: a collective completes only when every member takes
// part, so no member can be past the first closer's count unless it is
// waiting for the closer. Point-to-point calls are numbered per pair and
// are not counted.

// closeRecord is what the first member to close a communicator publishes.
type closeRecord struct {
	Rank  int    `json:"rank"`  // comm rank of the closer
	World int    `json:"world"` // its world rank
	Host  string `json:"host"`
	Calls uint64 `json:"calls"` // collectives it made on the communicator
}

func closeKey(comm string) string { return "close/" + comm }

// closing is a communicator's view of its members' closing: the first
// closer's record once it is known, and the collective this rank is in.
type closing struct {
	self    atomic.Bool // this rank is closing c (its close barrier is no later call)
	closer  atomic.Pointer[closeRecord]
	current atomic.Pointer[collectives.Call] // nil between collectives
	failed  atomic.Pointer[collectives.Call] // the last collective that failed here
}

// announceClose publishes c's close record (best effort, bounded; the key
// is write-once, so a later closer's record is refused, and that is fine:
// every closer made the same number of collectives or one is waiting).
func (c *Comm) announceClose() {
	c.closing.self.Store(true)
	rec := closeRecord{Rank: c.rank, World: c.WorldRank(), Host: c.world.host, Calls: c.engine.Seq()}
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(c.links.ctx, publishWait)
	defer cancel()
	_ = c.world.store.Put(ctx, closeKey(c.name), b)
}

// watchClose waits for the first closer's record while c is open.
func (c *Comm) watchClose() {
	b, err := c.world.store.Get(c.links.ctx, closeKey(c.name))
	if err != nil {
		return // c ended or closed, or the store did
	}
	var rec closeRecord
	if json.Unmarshal(b, &rec) != nil || rec.Rank == c.rank {
		return
	}
	c.closing.closer.Store(&rec)
	c.checkClosed()
}

// observeCall is the engine's observer: it tracks the collective this rank
// is in (and checks it against a closer's record), then hands the call to
// log, if any.
func (c *Comm) observeCall(log collectives.Observer) collectives.Observer {
	return func(ci collectives.Call) {
		if ci.Op != collectives.OpSendRecv {
			if ci.End {
				c.closing.current.Store(nil)
				if ci.Err != nil {
					c.closing.failed.Store(&ci)
				}
			} else {
				c.closing.current.Store(&ci)
				c.checkClosed()
			}
		}
		if log != nil {
			log(ci)
		}
	}
}

// checkClosed ends c with a mismatch when a member has closed it after
// fewer collectives than the one this rank is in.
func (c *Comm) checkClosed() {
	rec, cur := c.closing.closer.Load(), c.closing.current.Load()
	if rec == nil || cur == nil || cur.Seq <= rec.Calls || c.closing.self.Load() || c.fate.ended() != nil {
		return
	}
	err := &closedEarly{rec: *rec, comm: c.name, rank: c.rank, world: c.WorldRank(), host: c.world.host,
		call: fmt.Sprintf("%s #%d", cur.Op, cur.Seq)}
	c.publish(err)
	c.end(err)
}

// closedEarly is the mismatch of a member that closed the communicator
// while this rank was in a later collective.
type closedEarly struct {
	rec         closeRecord
	comm        string
	rank, world int
	host, call  string
}

func (e *closedEarly) Error() string {
	return fmt.Sprintf("%v: rank %d (world rank %d) on %s closed communicator %s after %d collectives while rank %d (world rank %d) on %s was in %s",
		errs.ErrMismatch, e.rec.Rank, e.rec.World, e.rec.Host, e.comm, e.rec.Calls, e.rank, e.world, e.host, e.call)
}

func (e *closedEarly) Unwrap() error { return errs.ErrMismatch }

// EndReport is a communicator's end as a member published it (the values
// put under the keys that fate.go and this file write), for a launcher
// that watches the store (bootstrap.ServerConfig.OnEvent) to name a failed
// job's cause.
type EndReport struct {
	Comm string // the communicator's name
	Kind string // the sentinel class: mismatch, peer-lost, timeout, closed, not-supported, aborted; or EndResumed
	Text string // the member's error
	// ClosedBy, for a member that closed the communicator while this one
	// was in a later collective: the closer's world rank (else -1), and
	// the collectives it made.
	ClosedBy    int
	ClosedCalls uint64
	// InCall is the collective the member was in when it ended the
	// communicator ("allreduce #7"; "" when it was in none).
	InCall string
	// Members are the communicator's world ranks (nil: not said).
	Members []int
	// Behind are the world ranks the member found had not called InCall
	// when it gave up (it asked every member; nil: not asked).
	Behind []int
	// Echo: the member repeats an end another member published first.
	Echo bool
}

// DecodeEnd reads a put of key and value as a communicator's end; ok is
// false for every other key.
func DecodeEnd(key string, value []byte) (EndReport, bool) {
	name, ok := strings.CutPrefix(key, "end/")
	if !ok {
		return EndReport{}, false
	}
	var rec endRecord
	if json.Unmarshal(value, &rec) != nil {
		return EndReport{}, false
	}
	r := EndReport{Comm: name, Kind: rec.Kind, Text: rec.Text, ClosedBy: -1, InCall: rec.InCall, Members: rec.Members, Behind: rec.Behind, Echo: rec.Echo}
	if rec.Closed != nil {
		r.ClosedBy, r.ClosedCalls = rec.Closed.World, rec.Closed.Calls
	}
	return r, true
}
