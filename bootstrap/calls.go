package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// transport carries one rank's requests to the engine (over TCP, or by a
// direct call in process).
type transport interface {
	// send queues m; it does not block.
	send(m message) error
	// sendWait queues m and waits up to d until it has left this process.
	sendWait(m message, d time.Duration) error
	// close tears the connection down (after a goodbye).
	close()
	// peer names the other end in errors ("bootstrap server at host:port").
	peer() string
	// gone is closed once nothing more can come from the server (nil:
	// never, an in-process engine answers at once).
	gone() <-chan struct{}
}

// endpoint is one rank's Store: it numbers collectives, matches replies to
// waiting calls, and holds the store's terminal error. The same code
// serves the TCP client and the in-process store.
type endpoint struct {
	rank, size int
	tx         transport

	sendMu sync.Mutex // orders sequence numbers with sending

	mu     sync.Mutex
	seq    uint64
	nextID uint64
	colls  map[uint64]chan collResMsg
	reqs   map[uint64]chan replyMsg
	done   chan struct{}
	err    error
	closed bool
}

var _ Store = (*endpoint)(nil)

func newEndpoint(rank, size int, tx transport) *endpoint {
	return &endpoint{
		rank: rank, size: size, tx: tx,
		colls: make(map[uint64]chan collResMsg),
		reqs:  make(map[uint64]chan replyMsg),
		done:  make(chan struct{}),
	}
}

// Rank returns this store's rank.
func (e *endpoint) Rank() int { return e.rank }

// Size returns the number of ranks in the job.
func (e *endpoint) Size() int { return e.size }

// Done is closed when the store has failed (abort, lost peer or server) or
// was closed; Err then says why.
func (e *endpoint) Done() <-chan struct{} { return e.done }

// Err returns nil while the store works, then the error that ended it.
func (e *endpoint) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// failWith ends the store with err unless it has already ended.
func (e *endpoint) failWith(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	e.err = err
	close(e.done)
}

// handle applies a message from the engine (in the read loop, or directly
// in process). It never blocks: reply channels have room for one.
func (e *endpoint) handle(m message) {
	switch v := m.(type) {
	case collResMsg:
		if ch := take(&e.mu, e.colls, v.Seq); ch != nil {
			ch <- v
		}
	case replyMsg:
		if ch := take(&e.mu, e.reqs, v.ID); ch != nil {
			ch <- v
		}
	case abortMsg:
		e.failWith(failureFromAbort(v).err())
	}
}

func (e *endpoint) collective(ctx context.Context, kind collKind, root int, data []byte) (collResMsg, error) {
	what := fmt.Sprintf("bootstrap: rank %d %s", e.rank, kind)
	if err := e.usable(ctx, what); err != nil {
		return collResMsg{}, err
	}
	if len(data) > MaxFrameSize-64 {
		return collResMsg{}, fmt.Errorf("%s: %d bytes exceed the %d-byte frame limit", what, len(data), MaxFrameSize)
	}
	e.sendMu.Lock()
	seq, ch := register(&e.mu, e.colls, &e.seq)
	err := e.tx.send(collMsg{Seq: seq, Kind: kind, Root: uint32(root), Data: data})
	e.sendMu.Unlock()
	what = fmt.Sprintf("%s #%d", what, seq)
	if err != nil {
		return collResMsg{}, e.sendError(what, err)
	}
	select {
	case r := <-ch:
		if r.Status != 0 {
			return collResMsg{}, newWireError(r.Status, "bootstrap: "+r.Text)
		}
		want := 0 // parts: every rank's for AllGather, the root's for Broadcast
		switch kind {
		case kAllGather:
			want = e.size
		case kBroadcast:
			want = 1
		}
		if r.Kind != kind || len(r.Parts) != want {
			return collResMsg{}, fmt.Errorf("%s: result is %s with %d parts: %w", what, r.Kind, len(r.Parts), errMalformed)
		}
		return r, nil
	case <-e.done:
		return collResMsg{}, e.Err()
	case <-ctx.Done():
		take(&e.mu, e.colls, seq)
		err := ctxError(ctx, what)
		if who := e.whoMissing(seq); who != "" {
			err = fmt.Errorf("%w (%s)", err, who)
		}
		return collResMsg{}, err
	}
}

// usable returns why a call named what cannot start: the store has
// failed, or ctx has ended.
func (e *endpoint) usable(ctx context.Context, what string) error {
	if err := e.Err(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctxError(ctx, what)
	}
	return nil
}

// register files a new reply channel (room for one) in m under the
// number *next, which it advances, holding mu.
func register[V any](mu *sync.Mutex, m map[uint64]chan V, next *uint64) (uint64, chan V) {
	ch := make(chan V, 1)
	mu.Lock()
	defer mu.Unlock()
	n := *next
	*next++
	m[n] = ch
	return n, ch
}

// take removes the reply channel filed under n from m and returns it (nil
// when none is), holding mu.
func take[V any](mu *sync.Mutex, m map[uint64]chan V, n uint64) chan V {
	mu.Lock()
	defer mu.Unlock()
	ch := m[n]
	delete(m, n)
	return ch
}

// sendError explains a failed send: the store's own error if it has one.
func (e *endpoint) sendError(what string, err error) error {
	if serr := e.Err(); serr != nil {
		return serr
	}
	return fmt.Errorf("%s: %s: %w (%w)", what, e.tx.peer(), errs.ErrPeerLost, err)
}

// AllGather contributes data and returns every rank's contribution,
// indexed by rank. See Store.
func (e *endpoint) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	r, err := e.collective(ctx, kAllGather, 0, data)
	return r.Parts, err
}

// Broadcast returns root's data on every rank; other ranks' data is
// ignored. See Store.
func (e *endpoint) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= e.size {
		return nil, fmt.Errorf("bootstrap: rank %d broadcast: root %d out of range [0,%d)", e.rank, root, e.size)
	}
	if e.rank != root {
		data = nil
	}
	r, err := e.collective(ctx, kBroadcast, root, data)
	if err != nil {
		return nil, err
	}
	return r.Parts[0], nil
}

// Barrier returns once every rank has called it. See Store.
func (e *endpoint) Barrier(ctx context.Context) error {
	_, err := e.collective(ctx, kBarrier, 0, nil)
	return err
}

func (e *endpoint) request(ctx context.Context, what string, build func(id uint64) message) (replyMsg, error) {
	if err := e.usable(ctx, what); err != nil {
		return replyMsg{}, err
	}
	id, ch := register(&e.mu, e.reqs, &e.nextID)
	if err := e.tx.send(build(id)); err != nil {
		take(&e.mu, e.reqs, id)
		return replyMsg{}, e.sendError(what, err)
	}
	select {
	case r := <-ch:
		if r.Status != 0 {
			return replyMsg{}, newWireError(r.Status, what+": "+r.Text)
		}
		return r, nil
	case <-e.done:
		return replyMsg{}, e.Err()
	case <-ctx.Done():
		take(&e.mu, e.reqs, id)
		return replyMsg{}, ctxError(ctx, what)
	}
}

func checkKey(key string) error {
	if len(key) > maxKeyLen {
		return fmt.Errorf("key of %d bytes exceeds %d", len(key), maxKeyLen)
	}
	return nil
}

// Put stores value under key and returns once the store has it. Keys are
// write-once: putting different bytes under a key that is set fails with
// an error wrapping errs.ErrMismatch; putting the same bytes again is fine.
//
// Once the job has failed the store keeps nothing more, but its owner
// still hears of a put (the server reports puts that come after a
// failure, see engine.handle): a rank's word on how its communicator
// ended is the launcher's evidence, and it is often sent just as another
// rank's end fails the job. Such a put still fails, but it returns only
// once the server has answered it (at most flushBound): a rank prints its
// error and exits right after it, and an exit that resets the connection
// before the server has read the put would lose that word.
func (e *endpoint) Put(ctx context.Context, key string, value []byte) error {
	what := fmt.Sprintf("bootstrap: rank %d put %q", e.rank, key)
	if err := checkKey(key); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(value) > MaxFrameSize-maxKeyLen-64 {
		return fmt.Errorf("%s: %d bytes exceed the frame limit", what, len(value))
	}
	m := putMsg{Key: key, Value: value}
	if serr := e.Err(); serr != nil {
		if !e.isClosing() {
			e.putAfterFailure(ctx, serr, m)
		}
		return serr
	}
	if ctx.Err() != nil {
		return ctxError(ctx, what)
	}
	id, ch := register(&e.mu, e.reqs, &e.nextID)
	defer take(&e.mu, e.reqs, id)
	m.ID = id
	if err := e.tx.send(m); err != nil {
		return e.sendError(what, err)
	}
	select {
	case r := <-ch:
		if r.Status == 0 {
			return nil
		}
		if serr := e.Err(); serr != nil {
			return serr // the job failed: its error, as every other call gives
		}
		return newWireError(r.Status, what+": "+r.Text)
	case <-e.done:
		// The job failed while the put was on its way: the server answers
		// it either way (kept, or told to its owner after the failure).
		serr := e.Err()
		if !e.isClosing() {
			e.awaitAnswer(ctx, serr, ch)
		}
		return serr
	case <-ctx.Done():
		return ctxError(ctx, what)
	}
}

// putAfterFailure sends m, a put made once the job has failed (serr), and
// waits for the server's answer (awaitAnswer; none from a lost server).
func (e *endpoint) putAfterFailure(ctx context.Context, serr error, m putMsg) {
	id, ch := register(&e.mu, e.reqs, &e.nextID)
	defer take(&e.mu, e.reqs, id)
	m.ID = id
	// Out of the process whatever ctx says (a caller's deadline may have
	// passed already), then the answer within ctx.
	if e.tx.sendWait(m, flushBound) != nil {
		return
	}
	e.awaitAnswer(ctx, serr, ch)
}

// awaitAnswer waits for the server's answer to a put on ch, at most
// flushBound (or until ctx ends), once the job has failed (serr): the
// server answers once it has told its owner of the put. A lost server
// answers nothing.
func (e *endpoint) awaitAnswer(ctx context.Context, serr error, ch chan replyMsg) {
	if errors.Is(serr, ErrServerLost) {
		return
	}
	t := time.NewTimer(flushBound)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	case <-e.tx.gone():
	}
}

// Get returns key's value, waiting until some rank puts it.
func (e *endpoint) Get(ctx context.Context, key string) ([]byte, error) {
	what := fmt.Sprintf("bootstrap: rank %d get %q", e.rank, key)
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	r, err := e.request(ctx, what, func(id uint64) message { return getMsg{ID: id, Key: key} })
	if err != nil {
		return nil, err
	}
	if r.Value == nil {
		return []byte{}, nil
	}
	return r.Value, nil
}

// Abort fails the job for every rank with err's sentinel class and text
// (this rank's own calls fail at once). It returns once the abort has left
// this process (at most flushBound), or an error if it could not be sent.
func (e *endpoint) Abort(err error) error {
	if err == nil {
		err = errors.New("aborted")
	}
	f := failure{Class: classOf(err), Rank: e.rank, Text: truncate(err.Error(), maxTextLen)}
	e.failWith(f.err())
	if serr := e.tx.sendWait(f.msg(), flushBound); serr != nil {
		return fmt.Errorf("bootstrap: rank %d abort: %s: %w", e.rank, e.tx.peer(), serr)
	}
	return nil
}

// Close says goodbye and closes the connection. Pending and later calls
// fail with errs.ErrClosed (unless the store had already failed). Close is
// idempotent; it returns an error only if the goodbye could not be sent
// while the store was healthy.
func (e *endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	healthy := e.err == nil
	e.mu.Unlock()
	e.failWith(fmt.Errorf("bootstrap: rank %d: store %w", e.rank, errs.ErrClosed))
	err := e.tx.sendWait(byeMsg{}, flushBound)
	e.tx.close()
	if err != nil && healthy {
		return fmt.Errorf("bootstrap: rank %d goodbye: %s: %w", e.rank, e.tx.peer(), err)
	}
	return nil
}

// isClosing reports whether Close has been called (the read loop then
// takes a dropped connection quietly).
func (e *endpoint) isClosing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}
