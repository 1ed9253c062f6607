package comm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/errs"
)

// A communicator's fate is NCCL's failure scope: what ends one
// communicator ends it on every member and nothing else. It ends when
//
//   - a collective on it fails on some member (peer lost, mismatch,
//     deadline): that member publishes the reason, the others read it;
//   - a member aborts or revokes it (Revoke, ncclCommAbort, ncclCommRevoke);
//   - a member's process is lost (the bootstrap's loss record, with a store
//     that keeps going after a loss; bootstrap.ServerConfig.KeepOnLoss);
//   - the job ends (Abort of the job, or a lost rank or server with a
//     store that does not keep going).
//
// Then every pending and later call on it fails with the first reason,
// which names the communicator, the rank that ended it and its host. The
// parent, siblings and children are separate fates: they go on.
//
// The reason travels through the bootstrap store under the communicator's
// abort key (write-once: the first member to publish wins); every member
// watches that key while the communicator is open.
type fate struct {
	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	err  error
	// deferred is an end held back until the call in flight returns
	// (endAfterCall): a call that fails meanwhile ends with it, as the
	// root cause; heldC is closed when it is set (awaitRootCause wakes).
	deferred error
	heldC    chan struct{}
}

// hold records err as the end held back for the call in flight.
func (f *fate) hold(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deferred == nil {
		f.deferred = err
		close(f.heldC)
	}
}

// held is the end held back, if any.
func (f *fate) held() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deferred
}

func newFate() fate { return fate{done: make(chan struct{}), heldC: make(chan struct{})} }

// ended is nil while the communicator is healthy, then why it ended.
func (f *fate) ended() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// set records err as the reason (the first one wins) and reports whether
// it was the first.
func (f *fate) set(err error) bool {
	first := false
	f.once.Do(func() {
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
		close(f.done)
		first = true
	})
	return first
}

// end ends c locally with err: every pending and later message on its
// links fails with it (the PXN proxy's too: it watches the links).
func (c *Comm) end(err error) {
	if c.fate.set(err) {
		c.world.log.Debug("communicator ended", "comm", c.name, "error", err)
	}
	c.links.abort(c.fate.ended())
}

// Revoke: see rank.Comm.Revoke. It publishes the reason through the
// bootstrap (the members learn it there) and ends c here.
func (c *Comm) Revoke(reason error) {
	if prev := c.fate.ended(); prev != nil {
		// It has ended already (a member lost, a failure): make sure every
		// member hears that root cause, not this later reason.
		c.publish(prev)
		return
	}
	if reason == nil {
		reason = errors.New("revoked by the program")
	}
	err := fmt.Errorf("communicator %s ended by rank %d of %d (world rank %d) on %s: %w", c.name, c.rank, c.size, c.WorldRank(), c.world.host, reason)
	if !anySentinel(err) {
		err = fmt.Errorf("%w: %w", errs.ErrAborted, err)
	}
	c.publish(err)
	c.end(err)
}

// Err: see rank.Comm.Err.
func (c *Comm) Err() error { return c.fate.ended() }

// Done: see rank.Comm.Done.
func (c *Comm) Done() <-chan struct{} { return c.fate.done }

// sentinels, in the order that picks an error's class.
var sentinels = []struct {
	kind string
	err  error
}{
	{"mismatch", errs.ErrMismatch},
	{"peer-lost", errs.ErrPeerLost},
	{"timeout", errs.ErrTimeout},
	{"closed", errs.ErrClosed},
	{"not-supported", errs.ErrNotSupported},
	{"aborted", errs.ErrAborted},
}

func anySentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return true
		}
	}
	return false
}

// endRecord is what a member publishes when it ends a communicator.
type endRecord struct {
	Kind string `json:"kind"` // the sentinel class (sentinels)
	Text string `json:"text"`
	// Closed and InCall: a member closed the communicator while this one
	// was in InCall, a later collective (closing.go).
	Closed *closeRecord `json:"closed,omitempty"`
	InCall string       `json:"in_call,omitempty"`
	// Seq is the number of the collective that failed at the publisher
	// (InCall's number; 0: none): a member still in an earlier one lets
	// it finish before it ends (watchEnd).
	Seq uint64 `json:"seq,omitempty"`
	// Members are the communicator's world ranks (a launcher that reads
	// the record names only members), By the publisher's world rank.
	Members []int `json:"members,omitempty"`
	By      int   `json:"by"`
	// Behind: the world ranks the publisher found had not called InCall.
	Behind []int `json:"behind,omitempty"`
	// Echo: the member only repeats an end another member published (it
	// failed because of it); the key keeps the first, a launcher watching
	// the store hears every member's.
	Echo bool `json:"echo,omitempty"`
}

// remoteError is a reason read from the store: its text, and the sentinel
// of its class (with ErrAborted too, as the communicator was ended).
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

func (r endRecord) err() error {
	e := &remoteError{msg: r.Text, errs: []error{errs.ErrAborted}}
	for _, s := range sentinels {
		if s.kind == r.Kind && s.err != errs.ErrAborted {
			e.errs = append(e.errs, s.err)
		}
	}
	return e
}

func endKey(comm string) string { return "end/" + comm }

// publishWait bounds publishing a communicator's end.
const publishWait = 5 * time.Second

// publish tells the other members that c ended with err (best effort,
// bounded: a store that cannot take it has failed, and then every member
// learns that from the store itself).
func (c *Comm) publish(err error) { c.publishRecord(err, false) }

// echo publishes, as this member's, an end it learnt from another member
// (refused by the write-once key; seen by a launcher that watches the
// store: which members failed on it, and in which call).
func (c *Comm) echo(err error) { c.publishRecord(err, true) }

func (c *Comm) publishRecord(err error, echo bool) {
	rec := endRecord{Kind: "aborted", Text: err.Error(), Members: c.members, By: c.WorldRank(), Echo: echo}
	var ce *closedEarly
	if errors.As(err, &ce) {
		rec.Closed, rec.InCall = &ce.rec, ce.call
	} else if ci := c.closing.failed.Load(); ci != nil {
		rec.InCall, rec.Seq = fmt.Sprintf("%s #%d", ci.Op, ci.Seq), ci.Seq // the collective that failed here
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			rec.Kind = s.kind
			break
		}
	}
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), publishWait)
	defer cancel()
	// A second member's different reason is refused (the key is write-once):
	// the first reason is the one every member reports.
	if perr := c.world.store.Put(ctx, endKey(c.name), b); perr != nil && !errors.Is(perr, errs.ErrMismatch) {
		c.world.log.Debug("publish the end of a communicator", "comm", c.name, "error", perr)
	}
}

// watchEnd ends c when another member publishes its end; it returns when
// c ends or closes. An end for a lost member, published by a member that
// failed in a later collective than the one this rank is in, is held back
// until this rank's call returns (endAfterCall), as the loss itself is
// (watchLosses): the publisher finished this call, so its data for it is
// on the links already, and ending now would fail a call that can finish
// (a survivor's earlier call, docs/ERRORS.md). A call that cannot finish
// fails on its links and ends with the end held back as its cause.
func (c *Comm) watchEnd() {
	b, err := c.world.store.Get(c.links.ctx, endKey(c.name))
	if err != nil {
		return // c ended or closed, or the store did (world.watch handles that)
	}
	var rec endRecord
	if json.Unmarshal(b, &rec) != nil {
		rec = endRecord{Kind: "aborted", Text: fmt.Sprintf("communicator %s ended by another member (unreadable reason)", c.name)}
	}
	if cur := c.closing.current.Load(); rec.Kind == "peer-lost" && cur != nil && cur.Seq < rec.Seq {
		c.endAfterCall(rec.err(), serverLostGrace)
		return
	}
	c.end(rec.err())
}

// watchLosses reads the store's loss records (bootstrap.NextLoss) and ends
// every communicator that holds the lost rank. With a store that does not
// keep going after a loss no record comes: the store fails instead, and
// watch ends every communicator.
func (w *world) watchLosses() {
	for k := 0; ; k++ {
		l, err := bootstrap.NextLoss(context.Background(), w.store, k)
		if err != nil {
			return // the store ended: closed or failed
		}
		w.mu.Lock()
		if w.lost == nil {
			w.lost = map[int]bootstrap.Loss{}
		}
		w.lost[l.Rank] = l
		var hit []*Comm
		for c := range w.comms {
			if c.holds(l.Rank) >= 0 {
				hit = append(hit, c)
			}
		}
		w.mu.Unlock()
		for _, c := range hit {
			// As for a lost server (endAfterCall): the member may have
			// ended after its last collective (libnccl's ranks exit
			// without ncclCommDestroy), whose data the others still take
			// in; if it was gone mid-call, the call fails on its link and
			// ends with this loss as the root cause.
			go c.endAfterCall(c.lossError(l), serverLostGrace)
		}
	}
}

// holds returns the comm rank of world rank wr in c, -1 when it is not a
// member.
func (c *Comm) holds(wr int) int {
	for i, m := range c.members {
		if m == wr {
			return i
		}
	}
	return -1
}

// lossError is the reason c ends when its member l is lost.
func (c *Comm) lossError(l bootstrap.Loss) error {
	host := l.Host
	if l.Rank < len(c.world.hosts) {
		host = c.world.hosts[l.Rank] // the name the rank gave itself (the store knows its connection's)
	}
	return fmt.Errorf("communicator %s: member rank %d (world rank %d) on host %s was lost: %w", c.name, c.holds(l.Rank), l.Rank, host, l.Err())
}

// lostMember returns the loss of one of members, if any was lost.
func (w *world) lostMember(members []int) (bootstrap.Loss, bool) {
	for _, m := range members {
		if l, ok := w.lost[m]; ok {
			return l, true
		}
	}
	return bootstrap.Loss{}, false
}
