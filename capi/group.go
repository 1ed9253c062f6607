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

// threadGroups are the open groups, by OS thread id.
type threadGroups struct {
	mu       sync.Mutex
	byThread map[int]*group
}

// start is ncclGroupStart for thread tid.
func (t *threadGroups) start(tid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	if g == nil {
		g = &group{}
		t.byThread[tid] = g
	}
	g.depth++
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

// run runs what an ended group deferred (see Library.GroupEnd).
func (g *group) run() error {
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
