package cu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The capture calls of Lib. Host functions (cuLaunchHostFunc, user object
// destructors) are Go funcs: the driver calls one C-callable trampoline
// with a key, and the trampoline runs the func registered under it.

// hostFns is the table the trampoline reads. It is package state because a
// C function pointer cannot carry a Go closure and purego makes a limited
// number of trampolines per process: there is one, made on first use.
type hostFns struct {
	once  sync.Once
	tramp uintptr
	mu    sync.Mutex
	next  uintptr
	fns   map[uintptr]hostFn
}

type hostFn struct {
	fn      func()
	oneShot bool // drop after the first run (an eager cuLaunchHostFunc)
}

var callbacks hostFns

// register returns the trampoline and the key under which fn runs.
func (h *hostFns) register(fn func(), oneShot bool) (tramp, key uintptr) {
	h.once.Do(func() {
		h.fns = map[uintptr]hostFn{}
		h.tramp = purego.NewCallback(func(key uintptr) uintptr { h.run(key); return 0 })
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.fns[h.next] = hostFn{fn: fn, oneShot: oneShot}
	return h.tramp, h.next
}

func (h *hostFns) run(key uintptr) {
	h.mu.Lock()
	e, ok := h.fns[key]
	if ok && e.oneShot {
		delete(h.fns, key)
	}
	h.mu.Unlock()
	if ok {
		e.fn()
	}
}

func (h *hostFns) drop(key uintptr) {
	h.mu.Lock()
	delete(h.fns, key)
	h.mu.Unlock()
}

func (l *Lib) StreamCaptureInfo(s Stream) (CaptureStatus, uint64, Graph, error) {
	var st CaptureStatus
	var id uint64
	var g Graph
	var err error
	if l.names[sStreamGetCaptureInfo] == "cuStreamGetCaptureInfo_v3" {
		err = l.call(sStreamGetCaptureInfo, uintptr(s), uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&id)),
			uintptr(unsafe.Pointer(&g)), 0, 0, 0)
	} else {
		err = l.call(sStreamGetCaptureInfo, uintptr(s), uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&id)),
			uintptr(unsafe.Pointer(&g)), 0, 0)
	}
	return st, id, g, err
}

func (l *Lib) EventRecordBranch(s Stream, e Event, after GraphNode) (GraphNode, error) {
	var st CaptureStatus
	var g Graph
	var deps *GraphNode // the driver's array, valid until the next call on s
	var n uintptr
	var err error
	if l.names[sStreamGetCaptureInfo] == "cuStreamGetCaptureInfo_v3" {
		var edges uintptr // edge data: the record waits for the whole node whatever its edges
		err = l.call(sStreamGetCaptureInfo, uintptr(s), uintptr(unsafe.Pointer(&st)), 0, uintptr(unsafe.Pointer(&g)),
			uintptr(unsafe.Pointer(&deps)), uintptr(unsafe.Pointer(&edges)), uintptr(unsafe.Pointer(&n)))
	} else {
		err = l.call(sStreamGetCaptureInfo, uintptr(s), uintptr(unsafe.Pointer(&st)), 0, uintptr(unsafe.Pointer(&g)),
			uintptr(unsafe.Pointer(&deps)), uintptr(unsafe.Pointer(&n)))
	}
	if err != nil {
		return 0, err
	}
	if st != CaptureActive {
		return 0, &Error{Func: "cuGraphAddEventRecordNode", Code: ErrorIllegalState, Name: "CUDA_ERROR_ILLEGAL_STATE", Desc: "the stream is not in an active capture"}
	}
	all := make([]GraphNode, 0, int(n)+1)
	if n > 0 {
		all = append(all, unsafe.Slice(deps, int(n))...)
	}
	if after != 0 {
		all = append(all, after)
	}
	var node GraphNode
	var p uintptr
	if len(all) > 0 {
		p = uintptr(unsafe.Pointer(&all[0]))
	}
	err = l.call(sGraphAddEventRecordNode, uintptr(unsafe.Pointer(&node)), uintptr(g), p, uintptr(len(all)), uintptr(e))
	runtime.KeepAlive(all)
	return node, err
}

func (l *Lib) ThreadExchangeStreamCaptureMode(m CaptureMode) (CaptureMode, error) {
	v := m
	err := l.call(sThreadExchangeStreamCaptureMode, uintptr(unsafe.Pointer(&v)))
	return v, err
}

func (l *Lib) EventRecordWithFlags(e Event, s Stream, flags uint32) error {
	return l.call(sEventRecordWithFlags, uintptr(e), uintptr(s), uintptr(flags))
}

func (l *Lib) StreamWaitEventFlags(s Stream, e Event, flags uint32) error {
	return l.call(sStreamWaitEvent, uintptr(s), uintptr(e), uintptr(flags))
}

// LaunchHostFunc: an eager launch runs fn once; a captured one runs it at
// every replay, so its entry lives until the graph goes (a user object the
// graph holds drops it).
func (l *Lib) LaunchHostFunc(s Stream, fn func()) error {
	st, _, g, err := l.StreamCaptureInfo(s)
	if err != nil {
		return err
	}
	tramp, key := callbacks.register(fn, st != CaptureActive)
	if err := l.call(sLaunchHostFunc, uintptr(s), tramp, key); err != nil {
		callbacks.drop(key)
		return err
	}
	if st != CaptureActive {
		return nil
	}
	o, err := l.UserObjectCreate(func() { callbacks.drop(key) })
	if err != nil {
		return fmt.Errorf("host node: %w", err)
	}
	return l.GraphRetainUserObject(g, o, 1, true)
}

func (l *Lib) UserObjectCreate(destroy func()) (UserObject, error) {
	var key uintptr
	var tramp uintptr
	tramp, key = callbacks.register(func() { callbacks.drop(key); destroy() }, true)
	var o UserObject
	if err := l.call(sUserObjectCreate, uintptr(unsafe.Pointer(&o)), key, tramp, 1, UserObjectNoDestrSync); err != nil {
		callbacks.drop(key)
		return 0, err
	}
	return o, nil
}

func (l *Lib) UserObjectRelease(o UserObject, n uint32) error {
	return l.call(sUserObjectRelease, uintptr(o), uintptr(n))
}

func (l *Lib) GraphRetainUserObject(g Graph, o UserObject, n uint32, move bool) error {
	var flags uintptr
	if move {
		flags = GraphUserObjectMove
	}
	return l.call(sGraphRetainUserObject, uintptr(g), uintptr(o), uintptr(n), flags)
}

func (l *Lib) StreamBeginCapture(s Stream, m CaptureMode) error {
	return l.call(sStreamBeginCapture, uintptr(s), uintptr(m))
}

func (l *Lib) StreamEndCapture(s Stream) (Graph, error) {
	var g Graph
	err := l.call(sStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g)))
	return g, err
}

func (l *Lib) GraphInstantiate(g Graph) (GraphExec, error) {
	var x GraphExec
	err := l.call(sGraphInstantiate, uintptr(unsafe.Pointer(&x)), uintptr(g), 0)
	return x, err
}

func (l *Lib) GraphLaunch(x GraphExec, s Stream) error {
	return l.call(sGraphLaunch, uintptr(x), uintptr(s))
}

func (l *Lib) GraphDestroy(g Graph) error         { return l.call(sGraphDestroy, uintptr(g)) }
func (l *Lib) GraphExecDestroy(x GraphExec) error { return l.call(sGraphExecDestroy, uintptr(x)) }

func (l *Lib) StreamWriteValue32(s Stream, addr DevPtr, v uint32, flags uint32) error {
	return l.call(sStreamWriteValue32, uintptr(s), uintptr(addr), uintptr(v), uintptr(flags))
}

func (l *Lib) StreamWaitValue32(s Stream, addr DevPtr, v uint32, flags uint32) error {
	return l.call(sStreamWaitValue32, uintptr(s), uintptr(addr), uintptr(v), uintptr(flags))
}
