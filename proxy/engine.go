package proxy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// Engine is a rank's network progress engine: goroutines locked to OS
// threads that alone post ISend/IRecv on the network provider's
// connections and poll them with Test. Callers hand it operations (Post)
// and wait on the Op it returns; nothing of the network is touched outside
// its threads. Abort fails every queued and in-flight operation.
type Engine struct {
	rank  int
	queue chan []*Op // batches of operations to post, in order
	stop  chan struct{}
	ctx   context.Context // ends at Abort: the watchers' (watch) wait
	wg    sync.WaitGroup
	end   context.CancelFunc

	mu  sync.Mutex
	err error
}

// Op is one network operation handed to the engine.
type Op struct {
	start func() (net.Request, error)
	done  chan struct{}
	err   error
	sizes []int
}

// Done is closed when the operation completed or failed.
func (o *Op) Done() <-chan struct{} { return o.done }

// Wait waits for the operation or ctx; it returns the sizes Test reported.
func (o *Op) Wait(ctx context.Context) ([]int, error) {
	select {
	case <-o.done:
		return o.sizes, o.err
	case <-ctx.Done():
		return nil, fmt.Errorf("proxy op: %w", context.Cause(ctx))
	}
}

func (o *Op) finish(sizes []int, err error) {
	o.sizes, o.err = sizes, err
	close(o.done)
}

// queueLen bounds the batches waiting to be posted: Post blocks beyond it
// (nothing is unbounded).
const queueLen = 1024

// NewEngine starts threads progress goroutines (at least 1), each locked
// to its OS thread, for rank.
func NewEngine(rank, threads int) *Engine {
	e := &Engine{rank: rank, queue: make(chan []*Op, queueLen), stop: make(chan struct{})}
	e.ctx, e.end = context.WithCancel(context.Background())
	for range max(threads, 1) {
		e.wg.Add(1)
		go e.loop()
	}
	return e
}

// Post queues an operation: start runs on an engine thread and posts the
// provider request, which the thread then tests. After Abort, Post fails
// the operation at once.
func (e *Engine) Post(ctx context.Context, start func() (net.Request, error)) *Op {
	return e.PostAll(ctx, start)[0]
}

// PostAll queues several operations in one hand-over to the engine's
// thread (one wake-up of it instead of one each), which posts them in
// order.
func (e *Engine) PostAll(ctx context.Context, starts ...func() (net.Request, error)) []*Op {
	if len(starts) == 0 {
		return nil
	}
	ops := make([]*Op, len(starts))
	for i, start := range starts {
		ops[i] = &Op{start: start, done: make(chan struct{})}
	}
	fail := func(err error) []*Op {
		for _, o := range ops {
			o.finish(nil, err)
		}
		return ops
	}
	if err := e.Err(); err != nil {
		return fail(err)
	}
	select {
	case e.queue <- ops:
	case <-e.stop:
		return fail(e.Err())
	case <-ctx.Done():
		return fail(fmt.Errorf("rank %d proxy: post: %w", e.rank, context.Cause(ctx)))
	}
	return ops
}

// Err is the reason the engine was aborted, or nil.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Abort fails every queued and in-flight operation, and every later one,
// with err (which should name the rank that caused it), and stops the
// threads. The network requests in flight are the connections' to fail
// (abort them too).
func (e *Engine) Abort(err error) {
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return
	}
	if err == nil {
		err = errs.ErrAborted
	}
	e.err = fmt.Errorf("rank %d proxy: %w", e.rank, err)
	close(e.stop)
	e.end()
	e.mu.Unlock()
	e.wg.Wait()
	for {
		select {
		case ops := <-e.queue:
			for _, o := range ops {
				o.finish(nil, e.Err())
			}
		default:
			return
		}
	}
}

// Close stops the engine (Abort with errs.ErrClosed).
func (e *Engine) Close() {
	e.Abort(fmt.Errorf("proxy closed: %w", errs.ErrClosed))
}

type flight struct {
	o     *Op
	r     net.Request
	armed bool // a watcher waits for r
}

// watch waits for r to complete (its provider's Wait: a channel for tcp
// and ucx, nothing is posted or tested) and wakes the engine's thread,
// which then tests it. It ends at Abort.
func (e *Engine) watch(r net.Request, wake chan<- struct{}) {
	r.Wait(e.ctx)
	select {
	case wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// loop is one engine thread: it posts what is queued and tests what is in
// flight, and when nothing completed it blocks until a request completes
// (a watcher per request wakes it), another operation is queued, or the
// engine stops. It never polls idle: on a host whose cores are all busy
// (ranks ≥ cores), a polling thread, locked to its OS thread, costs a
// thread switch on every yield and takes the core that the socket copies
// and the other ranks need.
func (e *Engine) loop() {
	defer e.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var live []flight
	wake := make(chan struct{}, 1) // a request in flight may have completed
	take := func(ops []*Op) {
		for _, o := range ops {
			r, err := o.start()
			if err != nil {
				o.finish(nil, err)
				continue
			}
			live = append(live, flight{o: o, r: r})
		}
	}
	for {
		if len(live) == 0 {
			select {
			case ops := <-e.queue:
				take(ops)
			case <-e.stop:
				return
			}
		}
	drain:
		for range 64 {
			select {
			case ops := <-e.queue:
				take(ops)
			default:
				break drain
			}
		}
		progressed := false
		kept := live[:0]
		for _, f := range live {
			done, sizes, err := f.r.Test()
			if !done {
				kept = append(kept, f)
				continue
			}
			progressed = true
			f.o.finish(sizes, err)
		}
		clear(live[len(kept):])
		live = kept
		select {
		case <-e.stop:
			for _, f := range live {
				f.o.finish(nil, e.Err())
			}
			return
		default:
		}
		if progressed || len(live) == 0 {
			continue
		}
		// Nothing completed: watch what is in flight, and sleep until
		// something happens. A request that completed since its Test
		// wakes the engine through its watcher at once.
		for i := range live {
			if !live[i].armed {
				live[i].armed = true
				go e.watch(live[i].r, wake)
			}
		}
		select {
		case <-wake:
		case ops := <-e.queue:
			take(ops)
		case <-e.stop:
		}
	}
}

// errAborted reports whether err comes from an abort or close.
func errAborted(err error) bool {
	return errors.Is(err, errs.ErrAborted) || errors.Is(err, errs.ErrClosed)
}
