// Package nccl binds NVIDIA's NCCL library (libnccl.so.2), loaded at run
// time with purego (no cgo), so flexlink can run a collective through NCCL
// next to its own implementation: as a baseline in benchmarks, and as a
// backend where NCCL is installed.
//
// # Loading
//
// Open loads the library and resolves the entry points this package calls.
// On a machine without NCCL it returns an error that wraps
// errs.ErrNotSupported and keeps dlopen's message; tests turn that into a
// skip through internal/testenv. Nothing is cached: each Open asks the
// dynamic loader again (which keeps the library loaded after the first).
//
// # Contexts and threads
//
// NCCL works on the CUDA device and context current on the calling OS
// thread: ncclCommInitRank binds the communicator to the current device, and
// every collective launches kernels in the current context. Go moves
// goroutines between threads at any call, so this package never assumes a
// context is current. Instead, InitRankOn takes a Runner (normally the gpu
// package's helper that locks the goroutine to its thread and makes the
// device's primary context current) and the communicator it returns runs
// every NCCL call, including the error queries that follow a failure,
// inside that Runner. InitRank uses a Runner that only locks the thread, for
// callers that manage the context themselves: they call runtime.LockOSThread
// and cuCtxSetCurrent before, and keep the lock while they use the Comm.
//
// NCCL's group state (ncclGroupStart/ncclGroupEnd) and its last-error text
// are kept per OS thread too; see Comm.GroupStart.
//
// # Errors
//
// A failed NCCL call returns an *Error that names the entry point, NCCL's
// description and result name, and ncclGetLastError's detail:
// "ncclAllReduce: unhandled cuda error (ncclUnhandledCudaError): Cuda
// failure 'out of memory'". Comm methods wrap it with the rank.
package nccl

import (
	"fmt"
	"runtime"
)

// UniqueIDSize is NCCL_UNIQUE_ID_BYTES.
const UniqueIDSize = 128

// UniqueID is ncclUniqueId: opaque bytes that one rank creates with
// GetUniqueID and every rank of the communicator passes to InitRank. Move it
// between ranks through the bootstrap store like any other bytes.
type UniqueID [UniqueIDSize]byte

// Runner runs call with the caller's CUDA context current, on one OS thread
// for the whole call, and returns call's error (or its own, when it could not
// set the context). Package gpu's context helper has this shape.
type Runner func(call func() error) error

// lockedRunner is the default Runner: it keeps call on one OS thread (NCCL's
// group and last-error state are per thread) and leaves the context alone.
func lockedRunner(call func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return call()
}

// Lib is the loaded NCCL library. Get one from Open. Its methods are safe
// for concurrent use.
type Lib struct {
	api  api
	path string
}

// Open loads DefaultLibrary (libnccl.so.2). Without it, or when it lacks an
// entry point this package needs, the error wraps errs.ErrNotSupported and
// says why ("no libnccl: libnccl.so.2: cannot open shared object file: No
// such file or directory").
func Open() (*Lib, error) { return openPath(DefaultLibrary) }

func openPath(path string) (*Lib, error) {
	d, err := load(path)
	if err != nil {
		return nil, fmt.Errorf("nccl: %w", err)
	}
	return &Lib{api: d, path: path}, nil
}

// Path is the library Open loaded.
func (l *Lib) Path() string { return l.path }

// Version is NCCL's version code: 10000*major + 100*minor + patch (22703 for
// 2.27.3) since NCCL 2.9.
func (l *Lib) Version() (int, error) {
	v, r := l.api.getVersion()
	if err := check(l.api, "ncclGetVersion", r, 0); err != nil {
		return 0, fmt.Errorf("nccl: %w", err)
	}
	return v, nil
}

// GetUniqueID creates the identifier of a new communicator. Call it on one
// rank and hand the result to all (it is plain bytes). It runs without a
// Runner: it sets up NCCL's bootstrap, not a device.
func (l *Lib) GetUniqueID() (UniqueID, error) {
	id, r := l.api.getUniqueID()
	if err := check(l.api, "ncclGetUniqueId", r, 0); err != nil {
		return UniqueID{}, fmt.Errorf("nccl: %w", err)
	}
	return id, nil
}

// InitRank joins communicator id as rank of n (0 <= rank < n). It blocks
// until all n ranks have called it. The communicator uses the CUDA device
// current on the calling thread: the caller must have called
// runtime.LockOSThread and made the right context current (cuCtxSetCurrent),
// and must keep doing so for every later call on the Comm. Prefer InitRankOn.
func (l *Lib) InitRank(n, rank int, id UniqueID) (*Comm, error) {
	return l.InitRankOn(n, rank, id, nil)
}

// InitRankOn is InitRank with ncclCommInitRank, and every later call on the
// returned Comm, run inside withCtx (nil: the calling thread's context, as
// InitRank). withCtx must make the same device's context current each time.
func (l *Lib) InitRankOn(n, rank int, id UniqueID, withCtx Runner) (*Comm, error) {
	if n < 1 || rank < 0 || rank >= n {
		return nil, fmt.Errorf("nccl: init rank %d of %d: rank out of range", rank, n)
	}
	run := withCtx
	if run == nil {
		run = lockedRunner
	}
	var h commHandle
	err := run(func() error {
		var r Result
		h, r = l.api.commInitRank(n, id, rank)
		return check(l.api, "ncclCommInitRank", r, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("nccl rank %d of %d: init: %w", rank, n, err)
	}
	if h == 0 {
		return nil, fmt.Errorf("nccl rank %d of %d: init: ncclCommInitRank succeeded but returned no communicator", rank, n)
	}
	return &Comm{api: l.api, h: h, n: n, rank: rank, run: run}, nil
}
