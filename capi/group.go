package capi

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// group is one thread's ncclGroupStart/End state: the nesting depth and
// what was deferred to the outermost ncclGroupEnd.
type group struct {
	depth int
	inits []func()
	comms []*Comm // being initialised by inits
	works []*work
	err   error // the first call refused inside the group
	// order and split are byComm's answer (the communicators, each one's
	// calls), kept with the group for the next that reuses it; all is
	// byComm's answer for a group on one communicator (works itself).
	order []*Comm
	split [][]*work
	all   [1][]*work
	home  *threadGroups // whose spare groups it goes back to (done)
}

// threadGroups are the open groups, by OS thread id.
type threadGroups struct {
	mu       sync.Mutex
	byThread map[int]*group
	// open counts the threads with a group open (len(byThread), changed
	// under mu). A call outside any group (the common case) reads it and
	// takes no lock: a thread's own ncclGroupStart happened before its
	// calls, so a zero here means the calling thread has none open, and
	// another thread's group starting meanwhile is not this call's.
	open atomic.Int32
	// spare are groups that have ended and run, reused by the next
	// outermost ncclGroupStart (done).
	spare sync.Pool
}

// start is ncclGroupStart for thread tid.
func (t *threadGroups) start(tid int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	if g == nil {
		g, _ = t.spare.Get().(*group)
		if g == nil {
			g = &group{home: t}
		}
		t.byThread[tid] = g
		t.open.Add(1)
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
	return t.inGroup(tid, func(g *group) { g.works = append(g.works, w) })
}

// refused records err, a call's failure inside tid's group, and reports
// whether there was a group: the outermost ncclGroupEnd then fails with
// it and runs none of the group's calls (NCCL's ncclGroupEnd after an
// error), so no rank runs half a group.
func (t *threadGroups) refused(tid int, err error) bool {
	return t.inGroup(tid, func(g *group) {
		if g.err == nil {
			g.err = err
		}
	})
}

// inGroup calls f with tid's group, under the lock, and reports whether
// tid had a group open.
func (t *threadGroups) inGroup(tid int, f func(g *group)) bool {
	if t.open.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.byThread[tid]
	if g == nil || g.depth == 0 {
		return false
	}
	f(g)
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
	t.open.Add(-1)
	return g, nil
}

// runInits runs the group's deferred initialisations, all at once, and
// returns the first failure.
func (g *group) runInits() error {
	if len(g.inits) == 0 {
		return nil
	}
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
		err := g.runInits()
		if err == nil {
			err = fmt.Errorf("ncclGroupEnd: no call of the group ran, since one was refused: %w", g.err)
		}
		g.done()
		return err
	}
	order, byComm := g.byComm()
	blocking := true
	for _, c := range order {
		blocking = blocking && c.cfg.IsBlocking()
		c.mu.Lock()
		c.inflight++
		c.mu.Unlock()
	}
	for _, c := range g.comms {
		blocking = blocking && c.cfg.IsBlocking()
	}
	if !blocking {
		go g.runAsync(order, byComm)
		return fail(InProgress, "group in progress")
	}
	err := g.runCalls(order, byComm)
	g.done()
	return err
}

// runAsync is runCalls for a non-blocking group, on a goroutine of its
// own (arguments, not a closure: the blocking path's lists stay off the
// heap).
func (g *group) runAsync(order []*Comm, byComm [][]*work) {
	_ = g.runCalls(order, byComm)
	g.done()
}

// done gives back g, ended and run (nothing refers to it any more), for
// a later group to reuse: what it held is dropped. Groups with many calls
// are left to the collector.
func (g *group) done() {
	if cap(g.works) > maxListLen {
		return
	}
	clear(g.works)
	clear(g.order)
	for i := range g.split {
		clear(g.split[i])
		g.split[i] = g.split[i][:0]
	}
	*g = group{works: g.works[:0], order: g.order[:0], split: g.split[:0], home: g.home}
	g.home.spare.Put(g)
}

// byComm splits the group's calls by communicator, in the order each
// communicator first appears (a linear search: a group holds few), into
// lists the group keeps for its next use; the calls are g.works itself
// when all are on one communicator (a process with one rank).
func (g *group) byComm() ([]*Comm, [][]*work) {
	g.order = g.order[:0]
	for _, w := range g.works {
		if !slices.Contains(g.order, w.c) {
			g.order = append(g.order, w.c)
		}
	}
	if len(g.order) == 1 {
		g.all[0] = g.works
		return g.order, g.all[:]
	}
	if n := len(g.order); cap(g.split) < n {
		g.split = append(g.split[:cap(g.split)], make([][]*work, n-cap(g.split))...)
	}
	g.split = g.split[:len(g.order)] // the lists of earlier uses, emptied by done
	for i := range g.split {
		g.split[i] = g.split[i][:0]
	}
	for _, w := range g.works {
		i := slices.Index(g.order, w.c)
		g.split[i] = append(g.split[i], w)
	}
	return g.order, g.split
}

// runCalls runs the initialisations, then each communicator's calls
// (byComm[i] on order[i]), the communicators concurrently (the last on
// the caller's thread), and returns the first failure. The calls' works
// are reused once all have returned.
func (g *group) runCalls(order []*Comm, byComm [][]*work) error {
	if err := g.runInits(); err != nil {
		for _, c := range order {
			c.mu.Lock()
			c.inflight--
			c.mu.Unlock()
		}
		return err
	}
	var err error
	switch len(order) {
	case 0:
		return nil
	case 1:
		err = order[0].runGroup(byComm[0])
	default:
		err = runConcurrently(order, byComm)
	}
	lib := order[0].lib
	for _, ws := range byComm {
		for _, w := range ws {
			lib.freeWork(w)
		}
	}
	return err
}

// runConcurrently runs each communicator's calls of a group (byComm[i]
// on order[i]) at the same time, the last on the caller's thread, and
// returns the first failure in order.
func runConcurrently(order []*Comm, byComm [][]*work) error {
	var wg sync.WaitGroup
	errs := make([]error, len(order))
	last := len(order) - 1
	for i, c := range order[:last] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.runGroup(byComm[i])
		}()
	}
	errs[last] = order[last].runGroup(byComm[last])
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// runGroup runs c's calls of a group; a failure fails the communicator
// as runAllOne's does.
func (c *Comm) runGroup(ws []*work) error {
	err := c.runAll(ws)
	if err != nil {
		local := isLocal(err)
		err = &Error{Code: ResultOf(err), Err: fmt.Errorf("ncclGroupEnd: rank %d of %d: %w", c.rank, c.nranks, err), Local: local}
		c.failed(err)
	}
	c.mu.Lock()
	c.inflight--
	c.mu.Unlock()
	return err
}
