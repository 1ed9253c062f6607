package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/internal/errs"
)

// CUDA graph capture. A stream in capture records the work enqueued on it
// into a graph instead of running it; the graph, instantiated, replays that
// work any number of times (Graph, GraphExec). What the library enqueues on
// a capturing stream must therefore replay correctly with no host
// involvement; collectives/direct says which calls do.
//
// Capture modes: while a capture in global mode (PyTorch's default) is in
// progress anywhere in the process, a "potentially unsafe" driver call
// (cuMemAlloc, synchronisations, queries) on a thread in global mode fails
// and invalidates the capture. So every driver call of this package that
// is not work enqueued on a stream runs with its thread switched to
// relaxed mode (do), and back after: the library never breaks a user's
// capture, whichever thread it runs on.

// CaptureMode is a capture's mode (cudaStreamCaptureMode).
type CaptureMode int

const (
	CaptureGlobal      CaptureMode = CaptureMode(cu.CaptureModeGlobal)
	CaptureThreadLocal CaptureMode = CaptureMode(cu.CaptureModeThreadLocal)
	CaptureRelaxed     CaptureMode = CaptureMode(cu.CaptureModeRelaxed)
)

func (m CaptureMode) String() string { return cu.CaptureMode(m).String() }

// CaptureInfo is a stream's capture state.
type CaptureInfo struct {
	Active      bool   // the stream is being captured
	Invalidated bool   // its capture failed; cuStreamEndCapture will say so
	ID          uint64 // the capture's id, unique in the process (0: none)
	graph       cu.Graph
}

// doAsync runs f with the device's context current on the locked calling
// thread, in the thread's own capture mode: for work enqueued on a stream,
// which a capture records whatever the mode.
func (dv *Device) doAsync(f func(api cu.API) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := dv.current(); err != nil {
		return err
	}
	return f(dv.drv.api)
}

// current makes the device's primary context current on the calling
// (locked) OS thread when it is not already. The thread's current context
// is asked each time (cuCtxGetCurrent reads the thread's binding) rather
// than remembered: the program may change it between two of the
// library's calls (cudaSetDevice, cuCtxSetCurrent), and the copies check
// their pointers against the current context, not the stream's. A
// program that calls on one GPU per thread, through the runtime, has this
// very context current already (the runtime's is the primary context),
// so the common call binds nothing.
func (dv *Device) current() error {
	api := dv.drv.api
	if c, err := api.CtxGetCurrent(); err == nil && c == dv.ctx {
		return nil
	}
	return api.CtxSetCurrent(dv.ctx)
}

// relaxed runs f with the calling (locked) thread in relaxed capture mode
// and restores the thread's mode after.
func relaxed(api cu.API, f func(api cu.API) error) error {
	prev, err := api.ThreadExchangeStreamCaptureMode(cu.CaptureModeRelaxed)
	if err != nil {
		return err
	}
	ferr := f(api)
	if prev != cu.CaptureModeRelaxed {
		if _, err := api.ThreadExchangeStreamCaptureMode(prev); err != nil && ferr == nil {
			ferr = err
		}
	}
	return ferr
}

// IsCaptureError reports whether err is the driver's refusal of a call
// because of a stream capture (CUDA_ERROR_STREAM_CAPTURE_*, among them
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED for work enqueued on a stream
// whose capture was invalidated before; CUDA_ERROR_CAPTURED_EVENT): the
// caller's capture failed, the context and its other streams did not.
func IsCaptureError(err error) bool {
	var e *cu.Error
	return errors.As(err, &e) && e.Code >= cu.ErrorCaptureUnsupported && e.Code <= cu.ErrorCapturedEvent
}

// Capture reports whether s is being captured into a CUDA graph.
func (s *Stream) Capture() (CaptureInfo, error) {
	var st cu.CaptureStatus
	var ci CaptureInfo
	err := s.dev.doAsync(func(api cu.API) (e error) { st, ci.ID, ci.graph, e = api.StreamCaptureInfo(s.h); return })
	if err != nil {
		return CaptureInfo{}, fmt.Errorf("%s: capture status of stream %#x: %w", s.dev, uintptr(s.h), err)
	}
	ci.Active, ci.Invalidated = st == cu.CaptureActive, st == cu.CaptureInvalidated
	return ci, nil
}

// BeginCapture starts capturing s in mode m: the work enqueued on s from
// now on (and on streams that join it by waiting on its events) is
// recorded, not run, until EndCapture. In CaptureThreadLocal mode the
// driver ties the capture to the calling OS thread: call
// runtime.LockOSThread before BeginCapture and keep it until EndCapture
// (otherwise EndCapture may run on another thread and fail with
// CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD).
func (s *Stream) BeginCapture(m CaptureMode) error {
	return s.enqueue("begin capture", func(api cu.API) error { return api.StreamBeginCapture(s.h, cu.CaptureMode(m)) })
}

// EndCapture ends s's capture and returns the graph. A capture that was
// invalidated (an unsafe call during it) fails here, naming why.
func (s *Stream) EndCapture() (*Graph, error) {
	var g cu.Graph
	if err := s.enqueue("end capture", func(api cu.API) (e error) { g, e = api.StreamEndCapture(s.h); return }); err != nil {
		return nil, err
	}
	return &Graph{dev: s.dev, h: g}, nil
}

// RecordExternal records e on s, which must be capturing: the graph
// records e at each replay (an event record node), and work outside the
// graph can wait for it. (The driver refuses the flag outside a capture.)
func (s *Stream) RecordExternal(e *Event) error {
	if e.dev != s.dev {
		return fmt.Errorf("%s: record an event of %s", s.dev, e.dev)
	}
	return s.enqueue("record event", func(api cu.API) error { return api.EventRecordWithFlags(e.h, s.h, cu.EventRecordExternal) })
}

// GraphNode is a node of a graph being captured (RecordBranch's).
type GraphNode struct{ h cu.GraphNode }

// RecordBranch records e at each replay of the graph s is capturing, after
// the work captured on s so far and after the node after (the zero
// GraphNode: none), as a side branch: s's later work does not wait for the
// record, as it waits for RecordExternal's. A flag call ends with one, each
// after the previous, so the records keep their order off the kernels'
// chain (0.05 µs a replayed call against 0.6 in the chain on an H200:
// docs/bench/h200-graph-nodes-2026-11-30-s20.txt). Fails unless s is
// capturing.
func (s *Stream) RecordBranch(e *Event, after GraphNode) (GraphNode, error) {
	if e.dev != s.dev {
		return GraphNode{}, fmt.Errorf("%s: record an event of %s", s.dev, e.dev)
	}
	var n cu.GraphNode
	err := s.enqueue("record event (branch)", func(api cu.API) (err error) { n, err = api.EventRecordBranch(s.h, e.h, after.h); return })
	return GraphNode{n}, err
}

// WaitExternal makes s, which must be capturing, wait for e, which may
// have been recorded outside the capture: each replay waits for e's
// latest record at the time of the replay (an event wait node). (The
// driver refuses the flag outside a capture.)
func (s *Stream) WaitExternal(e *Event) error {
	return s.enqueue("wait for event", func(api cu.API) error { return api.StreamWaitEventFlags(s.h, e.h, cu.EventWaitExternal) })
}

// LaunchHostFunc enqueues fn: it runs on a driver thread once the work
// before it is done, and work after it waits for it to return. fn must not
// call the driver (nor anything of this package). In a capture it runs at
// every replay.
func (s *Stream) LaunchHostFunc(fn func()) error {
	return s.enqueue("launch host function", func(api cu.API) error { return api.LaunchHostFunc(s.h, fn) })
}

// HoldForGraph makes the graph that s is capturing keep a reference until
// it (and every instantiation of it) is destroyed, then call release, once,
// on a driver thread: release must not call the driver, nor block. It
// fails when s is not capturing.
func (s *Stream) HoldForGraph(release func()) error {
	ci, err := s.Capture()
	if err != nil {
		return err
	}
	if !ci.Active {
		return fmt.Errorf("%s: hold for a graph: stream %#x is not capturing", s.dev, uintptr(s.h))
	}
	return s.dev.do(func(api cu.API) error {
		o, err := api.UserObjectCreate(release)
		if err != nil {
			return fmt.Errorf("%s: user object: %w", s.dev, err)
		}
		if err := api.GraphRetainUserObject(ci.graph, o, 1, true); err != nil {
			api.UserObjectRelease(o, 1) // runs release: nothing holds it
			return fmt.Errorf("%s: retain a user object on graph of capture %d: %w", s.dev, ci.ID, err)
		}
		return nil
	})
}

// Graph is a captured CUDA graph (EndCapture). Instantiate it to replay it;
// Close it when done (its instantiations stay usable).
type Graph struct {
	dev *Device
	h   cu.Graph

	mu     sync.Mutex
	closed bool
}

// Instantiate makes an executable graph from g.
func (g *Graph) Instantiate() (*GraphExec, error) {
	var x cu.GraphExec
	if err := g.dev.do(func(api cu.API) (e error) { x, e = api.GraphInstantiate(g.h); return }); err != nil {
		return nil, fmt.Errorf("%s: instantiate graph: %w", g.dev, err)
	}
	return &GraphExec{dev: g.dev, h: x}, nil
}

// Close destroys the graph. A second Close returns an error wrapping
// errs.ErrClosed.
func (g *Graph) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("%s: close graph: %w", g.dev, errs.ErrClosed)
	}
	if err := g.dev.do(func(api cu.API) error { return api.GraphDestroy(g.h) }); err != nil {
		return fmt.Errorf("%s: close graph: %w", g.dev, err)
	}
	g.closed = true
	return nil
}

// GraphExec is an instantiated graph: Launch replays it on a stream.
type GraphExec struct {
	dev *Device
	h   cu.GraphExec

	mu     sync.Mutex
	closed bool
}

// Launch enqueues one replay of x on s (of x's device).
func (x *GraphExec) Launch(s *Stream) error {
	if s.dev != x.dev {
		return fmt.Errorf("%s: launch a graph of %s", s.dev, x.dev)
	}
	return s.enqueue("launch graph", func(api cu.API) error { return api.GraphLaunch(x.h, s.h) })
}

// Close destroys the instantiation (replays already enqueued complete).
// A second Close returns an error wrapping errs.ErrClosed.
func (x *GraphExec) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return fmt.Errorf("%s: close graph exec: %w", x.dev, errs.ErrClosed)
	}
	if err := x.dev.do(func(api cu.API) error { return api.GraphExecDestroy(x.h) }); err != nil {
		return fmt.Errorf("%s: close graph exec: %w", x.dev, err)
	}
	x.closed = true
	return nil
}

// GraphAlloc returns n bytes of device memory that belong to the graph s
// is capturing: freed (on a goroutine) once the graph and its
// instantiations are destroyed, never before. Work captured on s may use
// it from one replay to the next without events, since launches of one
// instantiation run one after another (two instantiations of the graph
// replayed at once would share it). It fails when s is not capturing.
func (s *Stream) GraphAlloc(n int) (*Buffer, error) {
	b, err := s.dev.Alloc(n)
	if err != nil {
		return nil, err
	}
	// The release runs on a driver thread, which must not call the driver.
	if err := s.HoldForGraph(func() { go b.Free() }); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// WaitCond is the condition of Stream.WaitValue32.
type WaitCond uint32

const (
	WaitGEQ WaitCond = cu.WaitValueGEQ // (int32)(word - v) >= 0: a counter reached v
	WaitEQ  WaitCond = cu.WaitValueEQ  // word == v
	WaitAND WaitCond = cu.WaitValueAND // word & v != 0
	WaitNOR WaitCond = cu.WaitValueNOR // ^(word | v) != 0
)

// WriteValue32 enqueues a store of v to the 32-bit word at addr (device
// memory, Buffer.Ptr, or host memory mapped for the device,
// HostMem.DevicePtr), once the work before it on s is done. In a capture
// it is a node that stores at every replay.
func (s *Stream) WriteValue32(addr uintptr, v uint32) error {
	return s.enqueue("write value", func(api cu.API) error { return api.StreamWriteValue32(s.h, cu.DevPtr(addr), v, 0) })
}

// WaitValue32 makes the work enqueued on s after it wait until the word at
// addr satisfies c against v; the host does not block. In a capture it is
// a node that waits at every replay.
func (s *Stream) WaitValue32(addr uintptr, v uint32, c WaitCond) error {
	return s.enqueue("wait for value", func(api cu.API) error { return api.StreamWaitValue32(s.h, cu.DevPtr(addr), v, uint32(c)) })
}
