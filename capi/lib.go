package capi

import (
	"net/netip"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/settings"
)

// Region is the device allocation a pointer falls in.
type Region struct {
	Device int     // CUDA device ordinal
	Base   uintptr // start of the allocation (cuMemGetAddressRange)
	Size   int     // its length in bytes
	// BufferID is the driver's id of the allocation
	// (CU_POINTER_ATTRIBUTE_BUFFER_ID): unique for the life of the
	// process, so memory freed and allocated again at the same address
	// (PyTorch's caching allocator after empty_cache) is told apart from
	// the old. 0: the driver could not say, and the buffer is refused.
	BufferID uint64
	// NoIPC: the allocation cannot be exported with cuIpcGetMemHandle
	// (VMM memory, as PyTorch's expandable_segments; stream-ordered
	// pools). Calls on it go through a bounce buffer of the communicator.
	NoIPC bool
}

// Memory is what the library needs to know about the CUDA state of the
// process beyond package gpu: cmd/libnccl implements it with the driver
// API, tests with a table. Methods are called from the C caller's thread.
type Memory interface {
	// Locate reports whether p is device memory and which allocation holds
	// it; ok is false for host memory.
	Locate(p uintptr) (r Region, ok bool)
	// CurrentDevice is the calling thread's current CUDA device, as
	// cudaGetDevice reports it (0 when no context is current).
	CurrentDevice() int
	// Capturing reports whether stream is being captured into a CUDA graph.
	Capturing(stream uintptr) bool
	// Synchronize waits for the work queued on stream (for calls on host
	// buffers, which run at once).
	Synchronize(stream uintptr) error
}

// Options configure a Library. Zero values mean "from the environment".
type Options struct {
	Env settings.Env // nil: the process environment
	// Logger, when set, gets every line; nil: internal/flog loggers made
	// from FLEXLINK_DEBUG* or, where unset, NCCL_DEBUG* (ncclDebugEnv).
	Logger hclog.Logger
	// Memory tells device from host pointers; nil: no CUDA, every buffer
	// is host memory.
	Memory Memory
	// Driver opens the CUDA driver for device communicators; nil: gpu.Open.
	Driver func() (*gpu.Driver, error)
	// Announce, when set, receives the one line that says flexlink serves
	// the process (NCCL_DEBUG=INFO), once per communicator.
	Announce func(line string)
}

// Library is the state of the C library: communicator handles, groups per
// thread, the rendezvous this process serves, the last error, the CUDA
// driver and the device memory it knows. One per process (cmd/libnccl
// holds it); safe for concurrent use: each part has its own lock.
type Library struct {
	opt Options
	env settings.Env
	log hclog.Logger

	handles handles      // communicators and registrations (handles.go)
	groups  threadGroups // ncclGroupStart/End per thread (group.go)
	ids     rendezvous   // the ids this process made (uniqueid.go)
	last    lastError    // ncclGetLastError(NULL) (result.go)
	drv     driverState  // the CUDA driver (mem.go)
	mem     memRegistry  // device memory by address (mem.go)
	// closing counts the device-plane closes that ncclCommDestroy left
	// running in the background (comm.go).
	closing sync.WaitGroup
	// works are the checked calls run outside a group, reused (run.go).
	works sync.Pool
	// lists are the point-to-point path's lists, reused (run.go).
	lists sync.Pool
}

// New returns a Library.
func New(opt Options) *Library {
	l := &Library{
		opt:     opt,
		env:     opt.Env,
		log:     opt.Logger,
		handles: newHandles(),
		groups:  threadGroups{byThread: map[int]*group{}},
		ids:     rendezvous{served: map[[nonceBytes]byte]*served{}},
		mem:     memRegistry{allocs: map[uintptr]*gpu.Buffer{}},
	}
	if id, ok := opt.Memory.(Identifier); ok {
		l.opt.Memory = idMemory{Memory: opt.Memory, id: id, reg: &l.mem}
	}
	if l.env == nil {
		l.env = settings.OS()
	}
	l.env = ncclDebugEnv(l.env)
	l.ids.env = l.env
	if l.log == nil {
		l.log = processLogger(l.env)
	}
	return l
}

// Report records err as the last error (ncclGetLastError) and returns its
// result code. A nil err gives Success and keeps the last error.
func (l *Library) Report(err error) Result {
	if err == nil {
		return Success
	}
	r := ResultOf(err)
	if r == InProgress {
		return r
	}
	l.last.set(err.Error())
	l.log.Warn("nccl call failed", "result", r.String(), "error", err)
	return r
}

// LastError is ncclGetLastError(h): the text of the communicator's last
// failure when h names one that failed, else the process's last failure
// ("" when none).
func (l *Library) LastError(h uintptr) string {
	c := l.handles.get(h)
	last := l.last.get()
	if c != nil {
		if e := c.lastErr(); e != "" {
			return e
		}
	}
	return last
}

// GetUniqueID is ncclGetUniqueId: a fresh id naming a rendezvous this
// process will serve (see UniqueID).
func (l *Library) GetUniqueID() (UniqueID, error) {
	port, err := reservePort(l.env)
	if err != nil {
		return UniqueID{}, fail(SystemError, "ncclGetUniqueId: %w", err)
	}
	ip := advertisedAddr(l.env.String("FLEXLINK_SOCKET_IFNAME"))
	info, err := newIDInfo(netip.AddrPortFrom(ip, uint16(port)))
	if err != nil {
		return UniqueID{}, fail(SystemError, "ncclGetUniqueId: %w", err)
	}
	l.ids.add(info)
	return info.encode(), nil
}

// HasGPU reports whether the process has a usable CUDA driver (device
// buffers, ncclMemAlloc on the GPU).
func (l *Library) HasGPU() bool {
	drv, err := l.drv.open(l.opt)
	return err == nil && drv != nil
}

// MemAlloc is ncclMemAlloc: n bytes of device memory on the calling
// thread's current device. Without a GPU it fails with ncclInvalidUsage;
// cmd/libnccl then hands out host memory (the host-buffer extension).
func (l *Library) MemAlloc(n int) (uintptr, error) {
	if n <= 0 {
		return 0, fail(InvalidArgument, "ncclMemAlloc: size %d must be positive", n)
	}
	drv, err := l.drv.open(l.opt)
	if err != nil || drv == nil {
		return 0, fail(InvalidUsage, "ncclMemAlloc: no CUDA driver in this process (%v)", err)
	}
	dv, err := drv.Device(l.opt.Memory.CurrentDevice())
	if err != nil {
		return 0, fail(UnhandledCudaError, "ncclMemAlloc: %w", err)
	}
	b, err := dv.Alloc(n)
	if err != nil {
		return 0, fail(UnhandledCudaError, "ncclMemAlloc: %w", err)
	}
	l.mem.add(b)
	return b.Ptr(), nil
}

// MemFree is ncclMemFree for memory from MemAlloc; ours is false for an
// address MemAlloc did not return (cmd/libnccl's host allocations).
func (l *Library) MemFree(p uintptr) (ours bool, err error) {
	b := l.mem.take(p)
	if b == nil {
		return false, nil
	}
	if err := b.Free(); err != nil {
		return true, fail(UnhandledCudaError, "ncclMemFree: %w", err)
	}
	return true, nil
}

// Register is ncclCommRegister: flexlink maps buffers when a call first
// uses them, so registration only checks its arguments and returns a
// handle for Deregister.
func (l *Library) Register(h uintptr, p uintptr, n int) (uintptr, error) {
	if _, err := l.handles.comm(h, "ncclCommRegister"); err != nil {
		return 0, err
	}
	if p == 0 || n <= 0 {
		return 0, fail(InvalidArgument, "ncclCommRegister: buffer %#x of %d bytes: want a non-null buffer and a positive size", p, n)
	}
	return l.handles.register(), nil
}

// Deregister is ncclCommDeregister.
func (l *Library) Deregister(h, reg uintptr) error {
	if _, err := l.handles.comm(h, "ncclCommDeregister"); err != nil {
		return err
	}
	if !l.handles.deregister(reg) {
		return fail(InvalidArgument, "ncclCommDeregister: handle %#x is not a live registration", reg)
	}
	return nil
}

// GroupStart is ncclGroupStart for thread tid.
// Every group start and end is logged at TRACE (FLEXLINK_DEBUG=TRACE or
// NCCL_DEBUG=TRACE) with the thread and depth: a group a caller left open
// (an exception between its start and end) defers every later call on that
// thread, and these lines show where.
func (l *Library) GroupStart(tid int) {
	d := l.groups.start(tid)
	if l.log.IsTrace() { // the arguments would be boxed even when off
		l.log.Trace("ncclGroupStart", "tid", tid, "depth", d)
	}
}

// GroupsOpen reports whether any thread has a group open. When none has,
// the calling thread has none either (its own ncclGroupStart would have
// come first), so a call may pass tid 0 to Coll and save finding its
// thread's id (a system call, cmd/libnccl).
func (l *Library) GroupsOpen() bool { return l.groups.open.Load() > 0 }

// GroupEnd is ncclGroupEnd for thread tid. The outermost one runs what the
// group deferred: first the communicator initialisations, all at once (so
// one thread can create every rank of a communicator, as nccl-tests -g N
// does), then each communicator's calls in order, the communicators
// concurrently. It returns when the calls on host buffers are done and
// those on device buffers are enqueued; with any non-blocking communicator
// in the group it returns InProgress at once, and ncclCommGetAsyncError on
// each reports when its part is done.
func (l *Library) GroupEnd(tid int) error {
	g, err := l.groups.end(tid)
	if l.log.IsTrace() {
		l.log.Trace("ncclGroupEnd", "tid", tid, "depth", l.groups.depth(tid), "error", err)
	}
	if g == nil {
		return err
	}
	return g.run()
}
