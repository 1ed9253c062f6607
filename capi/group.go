package capi

import (
	"fmt"
	"sync"
)

// group is one thread's ncclGroupStart/End state: the nesting depth and
// what was deferred to the outermost ncclGroupEnd.
type group struct {
	depth int
	inits []func()
	comms []*Comm // being initialised by inits
	works []*work
	err   error // the first call refused inside the group
}

// threadGroups are the open groups, by OS thread id.
type threadGroups struct {
	mu       sync.Mutex
	byThread map[int]*group
}

// start is ncclGroupStart for thread tid.
func (t *threadGroups) start(tid int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	if g == nil {
		g = &group{}
		t.byThread[tid] = g
	}
	g.depth++
	return g.depth
}

// depth is thread tid's group depth (0: not in a group).
func (t *threadGroups) depth(tid int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.byThread[tid]; g != nil {
		return g.depth
	}
	return 0
}

// in reports whether thread tid is inside a group.
func (t *threadGroups) in(tid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	return g != nil && g.depth > 0
}

// deferInit adds the initialisation of c to tid's group (which is open).
func (t *threadGroups) deferInit(tid int, c *Comm, run func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	g.inits = append(g.inits, run)
	g.comms = append(g.comms, c)
}

// queue adds w to tid's group and reports whether there was one.
func (t *threadGroups) queue(tid int, w *work) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	if g == nil || g.depth == 0 {
		return false
	}
	g.works = append(g.works, w)
	return true
}

// refused records err, a call's failure inside tid's group, and reports
// whether there was a group: the outermost ncclGroupEnd then fails with
// it and runs none of the group's calls (NCCL's ncclGroupEnd after an
// error), so no rank runs half a group.
func (t *threadGroups) refused(tid int, err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	if g == nil || g.depth == 0 {
		return false
	}
	if g.err == nil {
		g.err = err
	}
	return true
}

// end is ncclGroupEnd's bookkeeping for thread tid: it returns the group
// when this ends the outermost one, nil when an inner one.
func (t *threadGroups) end(tid int) (*group, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	if g == nil || g.depth == 0 {
		return nil, fail(InvalidUsage, "ncclGroupEnd: not inside a group (no matching ncclGroupStart on this thread)")
	}
	g.depth--
	if g.depth > 0 {
		return nil, nil
	}
	delete(t.byThread, tid)
	return g, nil
}

// runInits runs the group's deferred initialisations, all at once, and
// returns the first failure.
func (g *group) runInits() error {
	var wg sync.WaitGroup
	for _, f := range g.inits {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	wg.Wait()
	for _, c := range g.comms {
		if c.initErr != nil {
			return fail(ResultOf(c.initErr), "ncclGroupEnd: ncclCommInitRank rank %d of %d: %w", c.rank, c.nranks, c.initErr)
		}
	}
	return nil
}

// run runs what an ended group deferred (see Library.GroupEnd).
func (g *group) run() error {
	if g.err != nil {
		// A call was refused inside the group: run the initialisations
		// (their communicators must not stay half made) and none of the
		// calls.
		if err := g.runInits(); err != nil {
			return err
		}
		return fmt.Errorf("ncclGroupEnd: no call of the group ran, since one was refused: %w", g.err)
	}
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
		if err := g.runInits(); err != nil {
			for _, c := range order {
				c.mu.Lock()
				c.inflight--
				c.mu.Unlock()
			}
			return err
		}
		var wg sync.WaitGroup
		errs := make([]error, len(order))
		for i, c := range order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := c.runAll(byComm[c])
				if err != nil {
					local := isLocal(err)
					err = &Error{Code: ResultOf(err), Err: fmt.Errorf("ncclGroupEnd: rank %d of %d: %w", c.rank, c.nranks, err), Local: local}
					c.failed(err)
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
