package cufake

import (
	"fmt"
	"syscall"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// Stream capture and graphs, as the driver has them:
//
//   - A stream in a capture records its operations as nodes instead of
//     running them (kernel launches keep a copy of their parameters, 8
//     bytes each as every flexlink kernel takes them; copies and memsets
//     keep their operands; host functions their func). An event recorded
//     in a capture belongs to it: another stream that waits on it joins the
//     capture (a fork), and querying, synchronising or waiting on it from
//     outside fails (CUDA_ERROR_CAPTURED_EVENT), also after the capture has
//     ended. A plain wait in a capture on an event recorded outside it
//     invalidates the capture (CUDA_ERROR_STREAM_CAPTURE_ISOLATION); an
//     external wait (CU_EVENT_WAIT_EXTERNAL) is a wait node, and an
//     external record (CU_EVENT_RECORD_EXTERNAL) a record node that records
//     the event at each replay; both flags are invalid outside a capture.
//   - Capture modes: a potentially unsafe call (cuMemAlloc, cuMemFree,
//     cuMemHostAlloc, cuStreamSynchronize, cuStreamQuery, cuEventQuery,
//     cuEventSynchronize) fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
//     and invalidates the captures that forbid it: a capture of the
//     calling thread (unless begun relaxed), and, while the thread's mode
//     (cuThreadExchangeStreamCaptureMode) is global, any other thread's
//     global capture. A thread in relaxed mode is never refused.
//     Synchronising or querying a capturing stream fails in every mode and
//     invalidates its capture. The fake has no synchronous cuMemcpy: the
//     API has none.
//   - Stream memory operations (memops.go) are nodes too.
//   - cuStreamEndCapture returns the graph (an error when invalidated);
//     cuGraphLaunch replays its nodes in capture order on the caller's
//     goroutine, kernels through their host implementations, so ranks'
//     replays meet as their eager calls do.
//   - User objects: a graph holds the references retained on it, an
//     instantiation a copy of them; the destructor runs when the last
//     reference goes (at once, on the caller's goroutine, after the
//     driver's lock is released).

type captState struct {
	next    uint64
	streams map[cu.Stream]*capture // streams in an active or invalidated capture
	modes   map[int]cu.CaptureMode // OS thread -> mode (absent: global)
	graphs  map[cu.Graph]*graph
	execs   map[cu.GraphExec]*graphExec
	users   map[cu.UserObject]*userObj
	nodes   map[cu.GraphNode]*graph // branch record nodes (EventRecordBranch), by their graph
}

func newCaptState() captState {
	return captState{streams: map[cu.Stream]*capture{}, modes: map[int]cu.CaptureMode{},
		graphs: map[cu.Graph]*graph{}, execs: map[cu.GraphExec]*graphExec{}, users: map[cu.UserObject]*userObj{},
		nodes: map[cu.GraphNode]*graph{}}
}

type capture struct {
	id          uint64
	mode        cu.CaptureMode
	thread      int
	origin      cu.Stream
	invalidated string // why ("" while active)
	g           *graph
	gh          cu.Graph
}

// node is one recorded operation; run replays it without the driver's lock.
type node struct {
	what string
	run  func() error
}

type graph struct {
	dev   int
	nodes []node
	users map[*userObj]uint32 // references this graph holds
	open  bool                // still being captured
}

type graphExec struct {
	dev   int
	nodes []node
	users map[*userObj]uint32
}

type userObj struct {
	refs    uint32
	destroy func()
}

// Graphs reports the graphs, instantiations and user objects alive.
func (f *Fake) Graphs() (graphs, execs, users int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.capt.graphs), len(f.capt.execs), len(f.capt.users)
}

// capturing returns s's capture (nil when none). Held: f.mu.
func (f *Fake) capturing(s cu.Stream) *capture { return f.capt.streams[s] }

// record appends run to s's capture when s is capturing: captured is true,
// and err is non-nil when the capture was invalidated. Held: f.mu.
func (f *Fake) record(fn string, s cu.Stream, run func() error) (captured bool, err error) {
	c := f.capturing(s)
	if c == nil {
		return false, nil
	}
	if c.invalidated != "" {
		return true, fail(fn, cu.ErrorCaptureInvalidated, "capture %d was invalidated: %s", c.id, c.invalidated)
	}
	c.g.nodes = append(c.g.nodes, node{what: fn, run: run})
	return true, nil
}

// invalidate marks c invalidated (the first reason is kept).
func (c *capture) invalidate(why string) {
	if c.invalidated == "" {
		c.invalidated = why
	}
}

// unsafeCall checks a potentially unsafe call against the captures in
// progress (see the file's comment). Held: f.mu.
func (f *Fake) unsafeCall(fn string) error {
	tid := syscall.Gettid()
	mode, ok := f.capt.modes[tid]
	if !ok {
		mode = cu.CaptureModeGlobal
	}
	if mode == cu.CaptureModeRelaxed {
		return nil
	}
	var hit []*capture
	seen := map[*capture]bool{}
	for _, c := range f.capt.streams {
		if seen[c] || c.invalidated != "" {
			continue
		}
		seen[c] = true
		own := c.thread == tid && c.mode != cu.CaptureModeRelaxed
		other := mode == cu.CaptureModeGlobal && c.thread != tid && c.mode == cu.CaptureModeGlobal
		if own || other {
			hit = append(hit, c)
		}
	}
	if len(hit) == 0 {
		return nil
	}
	for _, c := range hit {
		c.invalidate(fmt.Sprintf("%s on thread %d (mode %s) during a %s capture", fn, tid, mode, c.mode))
	}
	return fail(fn, cu.ErrorCaptureUnsupported, "potentially unsafe call during a %s capture begun on thread %d (this thread %d, mode %s)", hit[0].mode, hit[0].thread, tid, mode)
}

// syncStream refuses to synchronise or query a capturing stream,
// invalidating its capture. Held: f.mu.
func (f *Fake) syncStream(fn string, s cu.Stream) error {
	if c := f.capturing(s); c != nil {
		c.invalidate(fn + " of a capturing stream")
		return fail(fn, cu.ErrorCaptureUnsupported, "stream %#x is capturing", uint64(s))
	}
	return f.unsafeCall(fn)
}

// capturedEvent refuses to use an event last recorded in a capture from
// outside it. Held: f.mu.
func (f *Fake) capturedEvent(fn string, ev *event) error {
	if ev.capture != 0 {
		return fail(fn, cu.ErrorCapturedEvent, "the event was last recorded in capture %d", ev.capture)
	}
	return nil
}

func (f *Fake) StreamCaptureInfo(s cu.Stream) (cu.CaptureStatus, uint64, cu.Graph, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.knownStream("cuStreamGetCaptureInfo", s); err != nil {
		return 0, 0, 0, err
	}
	c := f.capturing(s)
	switch {
	case c == nil:
		return cu.CaptureNone, 0, 0, nil
	case c.invalidated != "":
		return cu.CaptureInvalidated, c.id, 0, nil
	}
	return cu.CaptureActive, c.id, c.gh, nil
}

func (f *Fake) ThreadExchangeStreamCaptureMode(m cu.CaptureMode) (cu.CaptureMode, error) {
	if m < cu.CaptureModeGlobal || m > cu.CaptureModeRelaxed {
		return 0, fail("cuThreadExchangeStreamCaptureMode", cu.ErrorInvalidValue, "mode %d", m)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tid := syscall.Gettid()
	old, ok := f.capt.modes[tid]
	if !ok {
		old = cu.CaptureModeGlobal
	}
	f.capt.modes[tid] = m
	return old, nil
}

func (f *Fake) StreamBeginCapture(s cu.Stream, m cu.CaptureMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.streamDev("cuStreamBeginCapture", s)
	if err != nil {
		return err
	}
	if s == 0 {
		return fail("cuStreamBeginCapture", cu.ErrorCaptureUnsupported, "the legacy stream cannot be captured")
	}
	if f.capturing(s) != nil {
		return fail("cuStreamBeginCapture", cu.ErrorIllegalState, "stream %#x is capturing already", uint64(s))
	}
	f.capt.next++
	g := &graph{dev: dev, users: map[*userObj]uint32{}, open: true}
	gh := cu.Graph(f.handle())
	f.capt.graphs[gh] = g
	f.capt.streams[s] = &capture{id: f.capt.next, mode: m, thread: syscall.Gettid(), origin: s, g: g, gh: gh}
	return nil
}

func (f *Fake) StreamEndCapture(s cu.Stream) (cu.Graph, error) {
	f.mu.Lock()
	c := f.capturing(s)
	if c == nil || c.origin != s {
		f.mu.Unlock()
		return 0, fail("cuStreamEndCapture", cu.ErrorCaptureUnmatched, "stream %#x did not begin a capture", uint64(s))
	}
	for st, sc := range f.capt.streams {
		if sc == c {
			delete(f.capt.streams, st)
		}
	}
	c.g.open = false
	if c.invalidated == "" {
		f.mu.Unlock()
		return c.gh, nil
	}
	run := f.dropGraph(c.gh)
	f.mu.Unlock()
	run()
	return 0, fail("cuStreamEndCapture", cu.ErrorCaptureInvalidated, "%s", c.invalidated)
}

// dropGraph forgets graph h and releases its user objects; the returned
// func runs the destructors that came due (after f.mu is released).
func (f *Fake) dropGraph(h cu.Graph) func() {
	g := f.capt.graphs[h]
	delete(f.capt.graphs, h)
	for n, ng := range f.capt.nodes {
		if ng == g {
			delete(f.capt.nodes, n)
		}
	}
	return f.releaseUsers(g.users)
}

// releaseUsers drops the references in refs. Held: f.mu.
func (f *Fake) releaseUsers(refs map[*userObj]uint32) func() {
	var due []func()
	for o, n := range refs {
		if d := f.releaseUser(o, n); d != nil {
			due = append(due, d)
		}
	}
	return func() {
		for _, d := range due {
			d()
		}
	}
}

// releaseUser drops n references of o and returns its destructor when it
// came due. Held: f.mu.
func (f *Fake) releaseUser(o *userObj, n uint32) func() {
	o.refs -= min(n, o.refs)
	if o.refs > 0 {
		return nil
	}
	for h, u := range f.capt.users {
		if u == o {
			delete(f.capt.users, h)
		}
	}
	return o.destroy
}

func (f *Fake) GraphInstantiate(h cu.Graph) (cu.GraphExec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuGraphInstantiate"); err != nil {
		return 0, err
	}
	g, ok := f.capt.graphs[h]
	if !ok || g.open {
		return 0, fail("cuGraphInstantiate", cu.ErrorInvalidValue, "unknown or unfinished graph")
	}
	x := &graphExec{dev: g.dev, nodes: append([]node(nil), g.nodes...), users: map[*userObj]uint32{}}
	for o, n := range g.users {
		o.refs += n
		x.users[o] = n
	}
	xh := cu.GraphExec(f.handle())
	f.capt.execs[xh] = x
	return xh, nil
}

// GraphLaunch replays x's nodes in order, at once.
func (f *Fake) GraphLaunch(xh cu.GraphExec, s cu.Stream) error {
	f.mu.Lock()
	x, ok := f.capt.execs[xh]
	dev, err := f.streamDev("cuGraphLaunch", s)
	switch {
	case err != nil:
	case !ok:
		err = fail("cuGraphLaunch", cu.ErrorInvalidHandle, "unknown graph exec")
	case f.capturing(s) != nil:
		err = fail("cuGraphLaunch", cu.ErrorNotSupported, "launching a graph into a capture (child graphs are not modelled)")
	case x.dev != dev:
		err = fail("cuGraphLaunch", cu.ErrorInvalidValue, "graph of device %d launched on a stream of device %d", x.dev, dev)
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for i, n := range x.nodes {
		if err := n.run(); err != nil {
			return fmt.Errorf("graph node %d (%s): %w", i, n.what, err)
		}
	}
	return nil
}

func (f *Fake) GraphDestroy(h cu.Graph) error {
	f.mu.Lock()
	g, ok := f.capt.graphs[h]
	if !ok || g.open {
		f.mu.Unlock()
		return fail("cuGraphDestroy", cu.ErrorInvalidValue, "unknown graph, or one still being captured")
	}
	run := f.dropGraph(h)
	f.mu.Unlock()
	run()
	return nil
}

func (f *Fake) GraphExecDestroy(xh cu.GraphExec) error {
	f.mu.Lock()
	x, ok := f.capt.execs[xh]
	if !ok {
		f.mu.Unlock()
		return fail("cuGraphExecDestroy", cu.ErrorInvalidValue, "unknown graph exec")
	}
	delete(f.capt.execs, xh)
	run := f.releaseUsers(x.users)
	f.mu.Unlock()
	run()
	return nil
}

func (f *Fake) UserObjectCreate(destroy func()) (cu.UserObject, error) {
	if destroy == nil {
		return 0, fail("cuUserObjectCreate", cu.ErrorInvalidValue, "nil destructor")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h := cu.UserObject(f.handle())
	f.capt.users[h] = &userObj{refs: 1, destroy: destroy}
	return h, nil
}

func (f *Fake) UserObjectRelease(h cu.UserObject, n uint32) error {
	f.mu.Lock()
	o, ok := f.capt.users[h]
	if !ok || n == 0 {
		f.mu.Unlock()
		return fail("cuUserObjectRelease", cu.ErrorInvalidValue, "unknown user object or zero count")
	}
	d := f.releaseUser(o, n)
	f.mu.Unlock()
	if d != nil {
		d()
	}
	return nil
}

func (f *Fake) GraphRetainUserObject(gh cu.Graph, h cu.UserObject, n uint32, move bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, gok := f.capt.graphs[gh]
	o, ok := f.capt.users[h]
	if !gok || !ok || n == 0 {
		return fail("cuGraphRetainUserObject", cu.ErrorInvalidValue, "unknown graph or user object, or zero count")
	}
	if move && o.refs < n {
		return fail("cuGraphRetainUserObject", cu.ErrorInvalidValue, "moving %d references of %d", n, o.refs)
	}
	if !move {
		o.refs += n
	}
	g.users[o] += n
	return nil
}

// LaunchHostFunc runs fn at once, or records it as a host node.
func (f *Fake) LaunchHostFunc(s cu.Stream, fn func()) error {
	f.mu.Lock()
	if _, err := f.streamDev("cuLaunchHostFunc", s); err != nil {
		f.mu.Unlock()
		return err
	}
	captured, err := f.record("cuLaunchHostFunc", s, func() error { fn(); return nil })
	f.mu.Unlock()
	if captured || err != nil {
		return err
	}
	fn()
	return nil
}

func (f *Fake) EventRecordWithFlags(e cu.Event, s cu.Stream, flags uint32) error {
	return f.eventRecord("cuEventRecordWithFlags", e, s, flags&cu.EventRecordExternal != 0)
}

func (f *Fake) StreamWaitEventFlags(s cu.Stream, e cu.Event, flags uint32) error {
	return f.streamWait("cuStreamWaitEvent", s, e, flags&cu.EventWaitExternal != 0)
}

// EventRecordBranch adds a record node to s's capture. The fake replays a
// graph's nodes in capture order, so a branch record runs where a record
// in the chain would: what it checks is the call's use (s capturing,
// `after` a node of the same graph).
func (f *Fake) EventRecordBranch(s cu.Stream, e cu.Event, after cu.GraphNode) (cu.GraphNode, error) {
	const fn = "cuGraphAddEventRecordNode"
	f.mu.Lock()
	c := f.capturing(s)
	var g *graph
	if c != nil {
		g = c.g
	}
	other, known := f.capt.nodes[after]
	f.mu.Unlock()
	switch {
	case c == nil || c.invalidated != "":
		return 0, fail(fn, cu.ErrorIllegalState, "stream %#x is not in an active capture", uintptr(s))
	case after != 0 && (!known || other != g):
		return 0, fail(fn, cu.ErrorInvalidValue, "dependency node %#x is not a node of the graph being captured", uintptr(after))
	}
	if err := f.eventRecord(fn, e, s, true); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.capt.next++
	n := cu.GraphNode(f.capt.next)
	f.capt.nodes[n] = g
	return n, nil
}
