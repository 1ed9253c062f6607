package ucx

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/flexlink/flexlink/fabric/net/ucx/internal/ucp"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/pause"
)

// engine owns the UCX context and worker. One goroutine, locked to its OS
// thread, makes every UCX call (the worker is UCS_THREAD_MODE_SINGLE):
// other goroutines hand it closures through do/call, and read results the
// loop publishes (request results are atomic pointers).
type engine struct {
	lib *ucp.Lib

	mu     sync.Mutex
	queue  []func()
	closed bool
	wake   chan struct{} // cap 1: the queue is not empty
	exited chan struct{} // closed when the loop has released UCX

	// Owned by the loop goroutine.
	ctx     ucp.Context
	w       ucp.Worker
	polls   []*pending // UCX requests in flight
	spare   []*pending // poll's second buffer
	probers []*recvReq // multi-receives looking for their messages
	stop    bool
}

// pending is one UCX request the loop polls. keep holds the Go memory UCX
// reads or writes until it completes, whatever happened to the user's
// request meanwhile.
type pending struct {
	r    ucp.Request
	recv bool // use ucp_tag_recv_request_test (the info is needed)
	keep any
	done func(st ucp.Status, info ucp.RecvInfo)
}

// startEngine loads nothing itself: lib is loaded. It creates the context
// and worker on the loop's thread and returns once they exist.
func startEngine(lib *ucp.Lib) (*engine, []byte, error) {
	e := &engine{lib: lib, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	type started struct {
		addr []byte
		err  error
	}
	ready := make(chan started, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer close(e.exited)
		ctx, err := lib.Init()
		if err != nil {
			ready <- started{err: fmt.Errorf("ucp init: %w", err)}
			return
		}
		w, err := lib.WorkerCreate(ctx)
		if err != nil {
			lib.Cleanup(ctx)
			ready <- started{err: fmt.Errorf("ucp worker: %w", err)}
			return
		}
		addr, err := lib.WorkerAddress(w)
		if err != nil {
			lib.WorkerDestroy(w)
			lib.Cleanup(ctx)
			ready <- started{err: fmt.Errorf("ucp worker address: %w", err)}
			return
		}
		e.ctx, e.w = ctx, w
		ready <- started{addr: addr}
		e.loop()
	}()
	s := <-ready
	return e, s.addr, s.err
}

// do queues f to run on the loop; false when the engine is closed.
func (e *engine) do(f func()) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.queue = append(e.queue, f)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return true
}

// call runs f on the loop and waits for it.
func (e *engine) call(f func() error) error {
	res := make(chan error, 1)
	if !e.do(func() { res <- f() }) {
		return fmt.Errorf("ucx provider: %w", errs.ErrClosed)
	}
	select {
	case err := <-res:
		return err
	case <-e.exited:
		return fmt.Errorf("ucx provider: %w", errs.ErrClosed)
	}
}

// shutdown runs final on the loop (it fails what is left), then releases
// UCX and waits for the loop to end.
func (e *engine) shutdown(final func()) {
	e.do(func() {
		final()
		e.stop = true
	})
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	<-e.exited
}

func (e *engine) track(p *pending) { e.polls = append(e.polls, p) }

// Idle backoff: a worker with nothing in flight is still progressed (UCX
// answers wire-up and keepalive messages of its peers from progress), every
// idleMax at most.
const (
	spinPolls = 64
	idleMax   = time.Millisecond
)

func (e *engine) loop() {
	timer := time.NewTimer(idleMax)
	empty := 0
	for {
		e.mu.Lock()
		q := e.queue
		e.queue = nil
		e.mu.Unlock()
		for _, f := range q {
			f()
		}
		n := e.lib.Progress(e.w)
		n += e.poll()
		n += e.probe()
		if e.stop {
			e.drain()
			return
		}
		if n > 0 || len(q) > 0 {
			empty = 0
			continue
		}
		empty++
		switch {
		case empty < spinPolls:
		case len(e.polls) > 0 || len(e.probers) > 0:
			// No runtime.Gosched: on this goroutine's locked thread a
			// yield is a hand-off between two OS threads (the proxy
			// engine measured it as a quarter of the machine's CPU). A
			// 5 µs nanosleep leaves the core to the socket copies: 4 MiB
			// broadcasts over loopback 3.6-3.9 -> 3.9-4.4 GB/s.
			pause.Sleep(5 * time.Microsecond)
		default:
			timer.Reset(idleMax)
			select {
			case <-e.wake:
			case <-timer.C:
			}
		}
	}
}

// poll checks every request in flight and runs the callbacks of those
// done. Callbacks may track new requests: they join e.polls, which is
// rebuilt from scratch here.
func (e *engine) poll() uint32 {
	var n uint32
	cur := e.polls
	e.polls = e.spare[:0]
	for i, p := range cur {
		cur[i] = nil
		var st ucp.Status
		var info ucp.RecvInfo
		if p.recv {
			st, info = e.lib.RecvTest(p.r)
		} else {
			st = e.lib.Check(p.r)
		}
		if st == ucp.StatusInProgress {
			e.polls = append(e.polls, p)
			continue
		}
		e.lib.Free(p.r)
		n++
		p.done(st, info)
	}
	e.spare = cur[:0]
	return n
}

// drain ends the engine: the final closure has force-closed endpoints and
// cancelled receives; requests still in flight get a bounded time to
// finish, then the worker is destroyed (after which UCX touches no buffer).
func (e *engine) drain() {
	deadline := time.Now().Add(2 * time.Second)
	for len(e.polls) > 0 && time.Now().Before(deadline) {
		e.lib.Progress(e.w)
		e.poll()
	}
	// Let UCX finish its own protocol requests (endpoint close, flush) too:
	// Debian's UCX is built with assertions, and ucp_worker_destroy aborts
	// the process when an endpoint still has one (seen under load after an
	// endpoint timeout).
	for settle := time.Now().Add(100 * time.Millisecond); time.Now().Before(settle); {
		e.lib.Progress(e.w)
	}
	if len(e.polls) > 0 {
		// Requests UCX never finished: destroying the worker now could abort
		// the process, so the worker and context are left to the process's
		// end (bounded: one per provider closed in this state).
		e.mu.Lock()
		e.closed = true
		e.queue = nil
		e.mu.Unlock()
		e.polls, e.probers = nil, nil
		return
	}
	e.lib.WorkerDestroy(e.w)
	e.lib.Cleanup(e.ctx)
	e.polls, e.probers = nil, nil
	e.mu.Lock()
	e.closed = true
	e.queue = nil // closures queued after stop never run; call reports ErrClosed
	e.mu.Unlock()
}
