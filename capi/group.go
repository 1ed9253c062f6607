package capi

import (
	"sync"
)

// group is one thread's ncclGroupStart/End state: the nesting depth and
// what was deferred to the outermost ncclGroupEnd.
type group struct {
	depth int
	inits []func()
	comms []*Comm // being initialised by inits
	works []*work
}

// GroupStart is ncclGroupStart for thread tid.
func (l *Library) GroupStart(tid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[tid]
	if g == nil {
		g = &group{}
		l.groups[tid] = g
	}
	g.depth++
}

func (l *Library) inGroup(tid int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[tid]
	return g != nil && g.depth > 0
}

func (l *Library) deferInit(tid int, c *Comm, run func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[tid]
	g.inits = append(g.inits, run)
	g.comms = append(g.comms, c)
}

// queue adds w to tid's group and reports whether there was one.
func (l *Library) queue(tid int, w *work) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[tid]
	if g == nil || g.depth == 0 {
		return false
	}
	g.works = append(g.works, w)
	return true
}

// GroupEnd is ncclGroupEnd for thread tid. The outermost one runs what the
// group deferred: first the communicator initialisations, all at once (so
// one thread can create every rank of a communicator, as nccl-tests -g N
// does), then each communicator's calls in order, the communicators
// concurrently. It returns when the calls on host buffers are done and
// those on device buffers are enqueued; with any non-blocking communicator
// in the group it returns InProgress at once, and ncclCommGetAsyncError on
// each reports when its part is done.
func (l *Library) GroupEnd(tid int) error {
	l.mu.Lock()
	g := l.groups[tid]
	if g == nil || g.depth == 0 {
		l.mu.Unlock()
		return fail(InvalidUsage, "ncclGroupEnd: not inside a group (no matching ncclGroupStart on this thread)")
	}
	g.depth--
	if g.depth > 0 {
		l.mu.Unlock()
		return nil
	}
	delete(l.groups, tid)
	l.mu.Unlock()

	var order []*Comm
	byComm := map[*Comm][]*work{}
	blocking := true
	for _, w := range g.works {
		if _, ok := byComm[w.c]; !ok {
			order = append(order, w.c)
			blocking = blocking && w.c.cfg.IsBlocking()
		}
		byComm[w.c] = append(byComm[w.c], w)
	}
	for _, c := range order {
		c.mu.Lock()
		c.inflight++
		c.mu.Unlock()
	}
	run := func() error {
		var wg sync.WaitGroup
		for _, f := range g.inits {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		}
		wg.Wait()
		for _, c := range g.comms {
			if c.initErr != nil {
				for _, c := range order {
					c.mu.Lock()
					c.inflight--
					c.mu.Unlock()
				}
				return fail(ResultOf(c.initErr), "ncclGroupEnd: ncclCommInitRank rank %d of %d: %w", c.rank, c.nranks, c.initErr)
			}
		}
		errs := make([]error, len(order))
		for i, c := range order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := c.runAll(byComm[c])
				if err != nil {
					err = fail(ResultOf(err), "ncclGroupEnd: rank %d of %d: %w", c.rank, c.nranks, err)
					c.note(err)
				}
				c.mu.Lock()
				c.inflight--
				c.mu.Unlock()
				errs[i] = err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range g.comms {
		blocking = blocking && c.cfg.IsBlocking()
	}
	if !blocking {
		go func() { _ = run() }()
		return fail(InProgress, "group in progress")
	}
	return run()
}
