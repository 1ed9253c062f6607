// Package comm is the communicator core behind rank.Comm: the world and
// its endpoints, the lazy link set, the call queue (Run), a communicator's
// fate (fate.go), split and shrink. Its public documentation lives in
// package rank: a method rank exposes says "see rank.Comm.X" here, and
// what is documented here is for the layers that use the core (rank,
// internal/comm/device, capi).
package comm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/flog"
	"github.com/flexlink/flexlink/internal/settings"
)

// closeWait bounds the leaving barrier of the world communicator's Close;
// subCloseWait a sub-communicator's (shorter: ranks that close their
// sub-communicators in different orders wait at most this long for each).
const (
	closeWait    = 30 * time.Second
	subCloseWait = 5 * time.Second
)

// Comm is a communicator: see rank.Comm for its contract (concurrency,
// call order, how a failure ends it on every member). The core adds Run
// (the call queue), the engine and links the collectives use, and the
// plane.Host methods the GPU planes call.
type Comm struct {
	world     *world
	name      string // unique within the job; also names shared segments
	id        uint64
	members   []int // comm rank -> world rank
	rank      int
	size      int
	eps       endpoints
	links     *linkSet
	engine    *collectives.Engine
	ownsWorld bool
	queue
	pxn     pxnState // the PXN proxy (pxn.go)
	fate    fate     // how the communicator ended (fate.go)
	closing closing  // a member that closed while others were in a call (closing.go)
}

// queue is the communicator's call queue: one collective at a time, and
// the counts of splits and shrinks made (they name the new communicators).
type queue struct {
	opMu      sync.Mutex
	deadline  callDeadline // the call's default deadline (FLEXLINK_TIMEOUT), reused
	closed    bool
	splitSeq  int
	shrinkSeq int
}

func newComm(w *world, name string, members []int, myWorldRank int, eps endpoints, addr addrFunc) (*Comm, error) {
	h := fnv.New64a()
	h.Write([]byte(name))
	c := &Comm{world: w, name: name, id: h.Sum64(), members: members, size: len(members), eps: eps, fate: newFate()}
	c.rank = -1
	for i, m := range members {
		if m == myWorldRank {
			c.rank = i
		}
	}
	if c.rank < 0 {
		eps.close()
		return nil, fmt.Errorf("rank %d is not a member of communicator %s", myWorldRank, name)
	}
	cfg, err := collectives.ConfigFromEnv(w.env)
	if err != nil {
		eps.close()
		return nil, err
	}
	if cfg.Rings = channelRings(c); cfg.Rings != nil && c.rank == 0 {
		flog.Sub(w.log, flog.Net).Info("ring collectives over every rail", "comm", name, "rings", ringsText(cfg.Rings))
	}
	cfg.Hosts = hostGroups(c)
	c.links = newLinkSet(c, addr)
	c.engine = collectives.NewEngine(c.id, peers{c.links}, collectives.NewHostMemory(), cfg)
	c.engine.SetObserver(c.observeCall(c.callObserver()))
	if l, lost := w.register(c); lost {
		c.end(c.lossError(l))
	}
	if err := w.store.Err(); err != nil {
		c.end(err)
	}
	go c.watchEnd()
	go c.watchClose()
	logSummary(c)
	return c, nil
}

// hostGroups are c's ranks by host (collectives.Config.Hosts), hosts in
// the order of their first rank, when c spans several hosts; nil on one.
// Every member computes the same from the same published hosts.
func hostGroups(c *Comm) [][]int {
	var groups [][]int
	at := map[string]int{}
	for r := range c.size {
		h := c.PeerHost(r)
		i, ok := at[h]
		if !ok {
			i = len(groups)
			at[h] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	if len(groups) < 2 {
		return nil
	}
	return groups
}

// Rank: see rank.Comm.Rank.
func (c *Comm) Rank() int { return c.rank }

// Size: see rank.Comm.Size.
func (c *Comm) Size() int { return c.size }

// WorldRank: see rank.Comm.WorldRank.
func (c *Comm) WorldRank() int { return c.members[c.rank] }

// Host: see rank.Comm.Host.
func (c *Comm) Host() string { return c.world.host }

// PeerHost: see rank.Comm.PeerHost.
func (c *Comm) PeerHost(r int) string { return c.world.hosts[c.members[r]] }

// LocalRank: see rank.Comm.LocalRank.
func (c *Comm) LocalRank() int {
	n := 0
	for i := 0; i < c.rank; i++ {
		if c.PeerHost(i) == c.world.host {
			n++
		}
	}
	return n
}

// LocalSize: see rank.Comm.LocalSize.
func (c *Comm) LocalSize() int {
	n := 0
	for i := 0; i < c.size; i++ {
		if c.PeerHost(i) == c.world.host {
			n++
		}
	}
	return n
}

// Links: see rank.Comm.Links.
func (c *Comm) Links() []LinkReport { return c.links.report() }

// Run executes one collective under the communicator's lock, applies the
// default deadline, and turns a failure into the end of the communicator
// on every member (fate.go). The ctx f receives is the call's only: with
// a default deadline it is the communicator's reused call context
// (deadline.go), which reads as the next call's once that begins, so
// neither it nor a context derived from it is used after f returns.
func (c *Comm) Run(ctx context.Context, what string, f func(ctx context.Context) error) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.closed {
		return fmt.Errorf("rank %d: %s on closed communicator: %w", c.rank, what, errs.ErrClosed)
	}
	if err := c.fate.ended(); err != nil {
		return fmt.Errorf("rank %d: %s on broken communicator %s: %w", c.rank, what, c.name, err)
	}
	if _, has := ctx.Deadline(); !has {
		if d := c.world.callTimeout; d > 0 {
			ctx = c.deadline.begin(ctx, time.Now().Add(d))
			defer c.deadline.end()
		}
	}
	err := f(ctx)
	if err == nil {
		return nil
	}
	c.awaitRootCause(err) // returns at once when a loss is already held back
	if held := c.fate.held(); held != nil && lossConsequence(err) {
		c.end(held) // a loss held back for this call (endAfterCall), before or during the wait, is its root cause
	}
	if fe := c.fate.ended(); fe != nil {
		if !errors.Is(err, fe) {
			// The communicator ended first (another member failed or
			// aborted it, a member was lost, the job ended): that reason is
			// the one to report.
			err = fmt.Errorf("%w (local error: %v)", fe, err)
		}
		c.echo(err) // with this rank's own view: a launcher may learn more from it
	} else {
		err = fmt.Errorf("rank %d on %s: communicator %s (rank %d of %d): %s: %w", c.WorldRank(), c.world.host, c.name, c.rank, c.size, what, err)
		c.publish(err)
	}
	c.end(err)
	return err
}

// lossConsequence reports whether err, a call's failure, may follow from a
// member's loss (a link lost, a wait timed out, an abort): a loss held back
// then is its root cause. A mismatch, an unsupported call or bad input is
// this rank's own finding and stays the cause.
func lossConsequence(err error) bool {
	return errors.Is(err, errs.ErrPeerLost) || errors.Is(err, errs.ErrTimeout) || errors.Is(err, errs.ErrAborted) ||
		errors.Is(err, context.DeadlineExceeded)
}

// rootCauseWait bounds how long a rank that lost a peer over a link waits
// for the bootstrap server to report the loss itself. A killed process's
// bootstrap connection closes at once, so the server usually names the
// lost rank and host within milliseconds; without the wait the first rank
// to notice would abort the job with its own, second-hand view ("recv from
// rank 3: peer lost") and every rank would report that instead of the root
// cause. A peer whose process is alive but whose link broke costs this
// much extra before the job aborts.
const rootCauseWait = time.Second

// awaitRootCause waits, for a peer-lost error only, until the
// communicator ends by other news (the job's end: the server's own
// detection), a loss is held back for the call (the bootstrap's loss
// record or the server's loss, endAfterCall), or rootCauseWait passes.
func (c *Comm) awaitRootCause(err error) {
	if !errors.Is(err, errs.ErrPeerLost) || c.fate.ended() != nil {
		return
	}
	t := time.NewTimer(rootCauseWait)
	defer t.Stop()
	select {
	case <-c.fate.done:
	case <-c.fate.heldC: // a loss held back for this call (endAfterCall): Run ends with it
	case <-t.C:
	}
}

// Abort: see rank.Comm.Abort.
func (c *Comm) Abort(reason error) {
	if reason == nil {
		reason = errors.New("aborted by the program")
	}
	err := fmt.Errorf("rank %d on %s aborted: %w", c.WorldRank(), c.world.host, reason)
	if !errors.Is(err, errs.ErrAborted) && !errors.Is(err, errs.ErrMismatch) && !errors.Is(err, errs.ErrPeerLost) && !errors.Is(err, errs.ErrTimeout) {
		err = fmt.Errorf("%w: %w", errs.ErrAborted, err)
	}
	c.world.store.Abort(err)
	c.end(err)
}

// Close: see rank.Comm.Close.
func (c *Comm) Close() error {
	c.opMu.Lock()
	if c.closed {
		c.opMu.Unlock()
		return nil
	}
	c.closed = true
	c.opMu.Unlock()
	quiescePXN(c)
	if c.fate.ended() == nil {
		// Say so first: a member inside a later collective then fails at
		// once with a mismatch instead of waiting out its deadline.
		c.announceClose()
		// Wait (bounded) until every rank is leaving, so no rank tears down
		// a link whose last message its peer has not read yet (links whose
		// sends complete on the receiver's acknowledgement, the network
		// transport's, would otherwise see the close before the ack).
		wait := subCloseWait
		if c.ownsWorld {
			wait = closeWait
		}
		// The wait also ends when the communicator does (a member that
		// ended it skips the barrier).
		ctx, cancel := context.WithTimeout(c.links.ctx, wait)
		if c.ownsWorld {
			c.world.store.Barrier(ctx)
		} else {
			c.engine.Barrier(ctx)
		}
		cancel()
	}
	c.world.unregister(c)
	closePXN(c)
	c.links.close()
	c.eps.close()
	if c.ownsWorld {
		c.world.closeNet()
		return c.world.store.Close()
	}
	return nil
}

// CheckRoot validates a root argument.
func (c *Comm) CheckRoot(root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("root %d out of range [0,%d)", root, c.size)
	}
	return nil
}

// CheckPeer validates the peer of a send or receive.
func (c *Comm) CheckPeer(p int) error {
	if p < 0 || p >= c.size || p == c.rank {
		return fmt.Errorf("peer %d invalid for rank %d of %d", p, c.rank, c.size)
	}
	return nil
}

// Engine is the host-memory collectives engine over the communicator's links.
// Call it only inside Run.
func (c *Comm) Engine() *collectives.Engine { return c.engine }

// AbortLinks fails every link of this communicator with err without telling
// the job: what the peers' links see when this process dies. Tests use it to
// simulate a crash; programs call Abort.
func (c *Comm) AbortLinks(err error) { c.links.abort(err) }

// Name is the communicator's name, unique within the job.
func (c *Comm) Name() string { return c.name }

// ID is the communicator's id (a hash of its name), carried in message tags.
func (c *Comm) ID() uint64 { return c.id }

// Peers is the communicator's host links as the collectives see them. Use
// it only inside Run.
func (c *Comm) Peers() collectives.Peers { return peers{c.links} }

// Log is the process's logger.
func (c *Comm) Log() hclog.Logger { return c.world.log }

// JobErr is nil while the communicator is healthy, then the reason it
// ended (the device planes' view of "the job" is their communicator's
// fate: fate.go).
func (c *Comm) JobErr() error { return c.fate.ended() }

// JobDone is closed when the communicator ends (a member failed, aborted
// or was lost, or the job ended).
func (c *Comm) JobDone() <-chan struct{} { return c.fate.done }

// AbortJob ends the communicator for every member with err (as Run does
// on a failure): see Revoke.
func (c *Comm) AbortJob(err error) { c.Revoke(err) }

// SameProcess reports whether the communicator's rank r lives in this
// process.
func (c *Comm) SameProcess(r int) bool { return c.world.pids[c.members[r]] == os.Getpid() }

// Env is the settings source the communicator was made with.
func (c *Comm) Env() settings.Env { return c.world.env }
