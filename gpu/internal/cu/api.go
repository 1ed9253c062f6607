package cu

import "unsafe"

// API is the set of driver calls flexlink makes. Lib implements it with
// libcuda; cufake implements it with host memory for tests.
//
// Every method returns nil or an *Error naming the entry point. Methods
// marked (ctx) need the right context current on the calling OS thread: the
// caller locks its goroutine to the thread and calls CtxSetCurrent first.
// Asynchronous calls (…Async, Record, LaunchKernel) only enqueue work on the
// stream; memory they name must stay valid until the stream has passed them.
// Implementations are safe for concurrent use from several threads.
type API interface {
	DriverVersion() (int, error)
	DeviceCount() (int, error)
	DeviceGet(ordinal int) (Device, error)
	DeviceName(d Device) (string, error)
	DeviceAttribute(a Attr, d Device) (int, error)
	DevicePCIBusID(d Device) (string, error)
	DeviceTotalMem(d Device) (uint64, error)
	DeviceCanAccessPeer(d, peer Device) (bool, error)

	// PrimaryCtxRetain returns d's primary context, retaining it (one
	// reference per call); PrimaryCtxRelease drops one reference.
	PrimaryCtxRetain(d Device) (Context, error)
	PrimaryCtxRelease(d Device) error
	// CtxSetCurrent binds c to the calling OS thread.
	CtxSetCurrent(c Context) error
	// CtxGetCurrent is the context bound to the calling OS thread (0:
	// none), a read of the thread's binding, which changes nothing: the
	// library asks it before each context-bound call and binds its
	// context only when another one (or none) is current.
	CtxGetCurrent() (Context, error)
	// CtxEnablePeerAccess (ctx) lets kernels and copies of the current context
	// reach peer's memory. It fails with ErrorPeerAlreadyEnabled when done
	// before.
	CtxEnablePeerAccess(peer Context) error

	MemGetInfo() (free, total uint64, err error) // (ctx)
	MemAlloc(n uint64) (DevPtr, error)           // (ctx)
	MemFree(p DevPtr) error                      // (ctx)
	// MemHostAlloc (ctx) returns n bytes of page-locked host memory.
	MemHostAlloc(n uint64, flags uint32) (unsafe.Pointer, error)
	MemFreeHost(p unsafe.Pointer) error // (ctx)
	// MemHostRegister (ctx) page-locks an existing mapping [p, p+n).
	MemHostRegister(p unsafe.Pointer, n uint64, flags uint32) error
	MemHostUnregister(p unsafe.Pointer) error                                 // (ctx)
	MemHostGetDevicePointer(p unsafe.Pointer) (DevPtr, error)                 // (ctx)
	MemcpyHtoDAsync(dst DevPtr, src unsafe.Pointer, n uint64, s Stream) error // (ctx)
	MemcpyDtoHAsync(dst unsafe.Pointer, src DevPtr, n uint64, s Stream) error // (ctx)
	// MemcpyAsync (ctx) copies between any two device pointers (unified
	// addressing), within one device or across peers.
	MemcpyAsync(dst, src DevPtr, n uint64, s Stream) error
	MemcpyPeerAsync(dst DevPtr, dstCtx Context, src DevPtr, srcCtx Context, n uint64, s Stream) error // (ctx)
	MemsetD8Async(dst DevPtr, v uint8, n uint64, s Stream) error                                      // (ctx)

	StreamCreate(flags uint32) (Stream, error) // (ctx)
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	// StreamQuery reports whether all work on s has completed.
	StreamQuery(s Stream) (bool, error)
	StreamWaitEvent(s Stream, e Event) error

	EventCreate(flags uint32) (Event, error) // (ctx)
	EventDestroy(e Event) error
	EventRecord(e Event, s Stream) error
	EventSynchronize(e Event) error
	// EventQuery reports whether the work e captured has completed.
	EventQuery(e Event) (bool, error)
	// EventElapsedTime returns milliseconds between two recorded timing events.
	EventElapsedTime(start, end Event) (float32, error)

	IpcGetMemHandle(p DevPtr) (IPCHandle, error)                // (ctx)
	IpcOpenMemHandle(h IPCHandle, flags uint32) (DevPtr, error) // (ctx)
	IpcCloseMemHandle(p DevPtr) error                           // (ctx)
	IpcGetEventHandle(e Event) (IPCHandle, error)               // (ctx)
	IpcOpenEventHandle(h IPCHandle) (Event, error)              // (ctx)

	// ModuleLoadData (ctx) loads a PTX or cubin image (JIT-compiling PTX).
	ModuleLoadData(image []byte) (Module, error)
	ModuleUnload(m Module) error // (ctx)
	ModuleGetFunction(m Module, name string) (Function, error)
	// FuncLoad (ctx) loads f's code onto the device now. With the driver's
	// lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2)
	// ModuleGetFunction does not: the first launch does, and loading may
	// wait for the context's work to finish, which deadlocks a launch made
	// while a stream of the context waits for that very launch's results
	// (the enqueue-and-return engine's case).
	FuncLoad(f Function) error
	// LaunchKernel (ctx) enqueues f on s. params[i] points at the value of the
	// kernel's i-th parameter; the values are copied before it returns.
	LaunchKernel(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, params []unsafe.Pointer) error

	// Stream capture and CUDA graphs (graph.go has the types).
	//
	// StreamCaptureInfo reports whether s is being captured, the capture's
	// id (unique in the process) and the graph it builds (0 unless active).
	StreamCaptureInfo(s Stream) (status CaptureStatus, id uint64, g Graph, err error)
	// ThreadExchangeStreamCaptureMode sets the calling OS thread's capture
	// mode and returns the one it had: library code sets Relaxed around
	// its own potentially unsafe calls and restores the old mode after.
	ThreadExchangeStreamCaptureMode(m CaptureMode) (CaptureMode, error)
	// EventRecordWithFlags records e on s; with EventRecordExternal (only
	// in a capture) as an event record node: the event is recorded at each
	// replay, and can be waited on outside the graph.
	EventRecordWithFlags(e Event, s Stream, flags uint32) error
	// EventRecordBranch adds to the graph s is capturing a node that
	// records e at each replay, after the work captured on s so far and
	// after the node `after` (0: none), without making s's later work
	// wait for it: the record is a side branch of the graph, off the
	// stream's chain (an event record in the chain costs a replayed
	// small kernel ~0.6 µs on an H200; a branch ~0.05, scripts/
	// graph_node_probe.cu). Fails unless s is capturing.
	EventRecordBranch(s Stream, e Event, after GraphNode) (GraphNode, error)
	// StreamWaitEventFlags makes s wait for e; with EventWaitExternal (only
	// in a capture) as an event wait node on an event recorded outside it.
	StreamWaitEventFlags(s Stream, e Event, flags uint32) error
	// LaunchHostFunc enqueues fn on s: it runs on a driver thread once the
	// work before it is done, and the stream waits for it. fn must not
	// call the driver. In a capture it becomes a host node that runs at
	// every replay.
	LaunchHostFunc(s Stream, fn func()) error
	// UserObjectCreate makes a CUDA user object with one reference whose
	// destroy runs (on a driver thread, which must not call the driver)
	// when its last reference goes: a graph that retained it holds one
	// until the graph and its instantiations are destroyed.
	UserObjectCreate(destroy func()) (UserObject, error)
	UserObjectRelease(o UserObject, n uint32) error
	// GraphRetainUserObject gives g n references to o; move takes them
	// from the caller's (GraphUserObjectMove).
	GraphRetainUserObject(g Graph, o UserObject, n uint32, move bool) error
	// StreamBeginCapture (ctx) starts capturing s in mode m; StreamEndCapture
	// ends it and returns the graph (an error when it was invalidated).
	StreamBeginCapture(s Stream, m CaptureMode) error
	StreamEndCapture(s Stream) (Graph, error)
	GraphInstantiate(g Graph) (GraphExec, error) // (ctx)
	GraphLaunch(x GraphExec, s Stream) error     // (ctx)
	GraphDestroy(g Graph) error
	GraphExecDestroy(x GraphExec) error

	// StreamWriteValue32 enqueues a store of v to the 32-bit word at addr
	// (device memory, or host memory mapped for the device);
	// StreamWaitValue32 makes s wait until the word at addr satisfies v
	// under flags (WaitValueGEQ, …). Both are nodes in a capture.
	StreamWriteValue32(s Stream, addr DevPtr, v uint32, flags uint32) error
	StreamWaitValue32(s Stream, addr DevPtr, v uint32, flags uint32) error
}
