// Command libnccl is flexlink's NCCL-compatible C library: built with
// -buildmode=c-shared into libnccl.so.2 (make libnccl), it exports the NCCL
// 2.30 entry points (and their pnccl* aliases) declared in include/nccl.h,
// and the host side of NCCL's device API (refused: docs/NCCL-API.md).
// This package only converts between C and Go values; package capi does the
// rest. Package initialisation does nothing: the library's state is made
// on the first call.
package main

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "api.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/flexlink/flexlink/capi"
	"github.com/flexlink/flexlink/internal/settings"
)

func main() {}

var (
	libOnce sync.Once
	theLib  *capi.Library
)

// lib is the process's capi.Library, made on first use.
func lib() *capi.Library {
	libOnce.Do(func() {
		// Logging goes through internal/flog like every rank's: NCCL_DEBUG*
		// reads as FLEXLINK_DEBUG* (docs/LOGGING.md), as of this first call
		// or the last ncclResetDebugInit (debugEnv).
		takeDebugEnv()
		env := settings.Env(libEnv)
		startProfile(env)
		startStackDump(env)
		opt := capi.Options{Env: env}
		if C.fl_cuda_open() != 0 {
			opt.Memory = cudaMemory{}
		}
		// The INFO announcement: NCCL_DEBUG=INFO or TRACE, or FLEXLINK_DEBUG
		// at INFO or below, at the first call; a later ncclResetDebugInit
		// can silence it. (It is not installed when off at the first call:
		// capi calls it for every communicator made, NOCOLOR splits too.)
		infoOn := func() bool {
			switch strings.ToUpper(env.String("FLEXLINK_DEBUG")) {
			case "INFO", "DEBUG", "TRACE":
				return true
			}
			return false
		}
		if infoOn() {
			host, _ := os.Hostname()
			opt.Announce = func(line string) {
				if infoOn() {
					fmt.Fprintf(os.Stderr, "%s:%d NCCL INFO %s\n", host, os.Getpid(), line)
				}
			}
		}
		theLib = capi.New(opt)
	})
	return theLib
}

// tid is the calling OS thread (a cgo callback runs on the C caller's
// thread), kept by helpers.c per thread: gettid once per thread.
func tid() int { return int(C.fl_tid()) }

// cudaMemory is capi.Memory over the driver calls of helpers.c, and a
// capi.Identifier: the library calls Identify (one driver call) for each
// buffer of each call and Locate only for an allocation it has not seen.
type cudaMemory struct{}

func (cudaMemory) Locate(p uintptr) (capi.Region, bool) {
	var dev C.int
	var base C.uintptr_t
	var size C.size_t
	var id C.ulonglong
	var ipc C.int
	if C.fl_locate(C.uintptr_t(p), &dev, &base, &size, &id, &ipc) == 0 {
		return capi.Region{}, false
	}
	return capi.Region{Device: int(dev), Base: uintptr(base), Size: int(size), BufferID: uint64(id), NoIPC: ipc == 0}, true
}

// Identify is on every call's path: fl_identify answers by value, so no
// Go variable's address goes to C (it would move to the heap, an
// allocation per buffer per call).
func (cudaMemory) Identify(p uintptr) (uint64, bool) {
	r := C.fl_identify(C.uintptr_t(p))
	if r.device == 0 {
		return 0, false
	}
	return uint64(r.id), true
}

func (cudaMemory) CurrentDevice() int { return int(C.fl_current_device()) }

func (cudaMemory) Capturing(s uintptr) bool { return C.fl_capturing(C.fl_handle(C.uintptr_t(s))) != 0 }

func (cudaMemory) Synchronize(s uintptr) error {
	if r := C.fl_synchronize(C.fl_handle(C.uintptr_t(s))); r != 0 {
		return fmt.Errorf("cuStreamSynchronize: CUresult %d", int(r))
	}
	return nil
}

func res(err error) C.ncclResult_t { return C.ncclResult_t(lib().Report(err)) }

// handle and streamOf are on every call's path: a conversion in Go, not a
// call into C. (The other way, commOf goes through fl_handle: an integer
// made a pointer in Go is what vet rightly questions.)
func handle(c C.ncclComm_t) uintptr     { return uintptr(unsafe.Pointer(c)) }
func commOf(h uintptr) C.ncclComm_t     { return C.ncclComm_t(C.fl_handle(C.uintptr_t(h))) }
func streamOf(s C.cudaStream_t) uintptr { return uintptr(unsafe.Pointer(s)) }

func unsupported(fn, why string) C.ncclResult_t {
	return res(&capi.Error{Code: capi.InvalidUsage, Err: fmt.Errorf("%s is not supported by flexlink's libnccl: %s", fn, why)})
}

func nullArg(fn, what string) C.ncclResult_t {
	return res(&capi.Error{Code: capi.InvalidArgument, Err: fmt.Errorf("%s: %s is NULL", fn, what)})
}

// config reads the caller's ncclConfig_t (NULL: defaults).
func config(cfg *C.char) (capi.Config, error) {
	if cfg == nil {
		return capi.DefaultConfig(), nil
	}
	head := C.GoBytes(unsafe.Pointer(cfg), 8)
	n := min(capi.ConfigSize(head), capi.ConfigBytes)
	return capi.ParseConfig(C.GoBytes(unsafe.Pointer(cfg), C.int(n)))
}

var (
	errStrOnce sync.Once
	errStrs    map[capi.Result]*C.char
)

func xGetErrorString(r C.ncclResult_t) *C.char {
	errStrOnce.Do(func() {
		errStrs = map[capi.Result]*C.char{}
		for code := capi.Success; code <= capi.InProgress; code++ {
			errStrs[code] = C.CString(capi.ErrorString(code))
		}
		errStrs[-1] = C.CString(capi.ErrorString(-1))
	})
	if s, ok := errStrs[capi.Result(r)]; ok {
		return s
	}
	return errStrs[-1]
}

func xGetLastError(c C.ncclComm_t) *C.char {
	s := C.CString(lib().LastError(handle(c)))
	defer C.free(unsafe.Pointer(s))
	return C.fl_last_error(s)
}

func xGetVersion(v *C.int) C.ncclResult_t {
	if v == nil {
		return nullArg("ncclGetVersion", "version")
	}
	*v = capi.Version
	return C.ncclResult_t(0)
}

func xGetUniqueId(id *C.ncclUniqueId) C.ncclResult_t {
	if id == nil {
		return nullArg("ncclGetUniqueId", "uniqueId")
	}
	u, err := lib().GetUniqueID()
	if err != nil {
		return res(err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(id)), capi.UniqueIDBytes), u[:])
	return C.ncclResult_t(0)
}

func initRank(fn string, comm *C.ncclComm_t, nranks C.int, id *C.ncclUniqueId, rank C.int, cfg *C.char) C.ncclResult_t {
	if comm == nil {
		return nullArg(fn, "comm")
	}
	*comm = nil
	c, err := config(cfg)
	if err != nil {
		return res(fmt.Errorf("%s: %w", fn, err))
	}
	var u capi.UniqueID
	copy(u[:], unsafe.Slice((*byte)(unsafe.Pointer(id)), capi.UniqueIDBytes))
	// The handle goes into *comm as soon as it exists, as NCCL does, so
	// another thread can abort an initialisation that waits for a rank
	// that never comes; a failed one leaves NULL there.
	h, err := lib().InitRankEarly(tid(), int(nranks), u, int(rank), c, func(h uintptr) { *comm = commOf(h) })
	if h == 0 {
		*comm = nil
	}
	return res(err)
}

func xCommInitRank(comm *C.ncclComm_t, nranks C.int, id C.ncclUniqueId, rank C.int) C.ncclResult_t {
	return initRank("ncclCommInitRank", comm, nranks, &id, rank, nil)
}

func xCommInitRankConfig(comm *C.ncclComm_t, nranks C.int, id C.ncclUniqueId, rank C.int, cfg unsafe.Pointer) C.ncclResult_t {
	return initRank("ncclCommInitRankConfig", comm, nranks, &id, rank, (*C.char)(cfg))
}

func xCommInitRankScalable(comm *C.ncclComm_t, nranks, rank, nID C.int, ids *C.ncclUniqueId, cfg unsafe.Pointer) C.ncclResult_t {
	if ids == nil || nID < 1 {
		return res(&capi.Error{Code: capi.InvalidArgument, Err: fmt.Errorf("ncclCommInitRankScalable: %d ids at %p: want at least one", int(nID), ids)})
	}
	// flexlink's rendezvous is one server: the first id names it.
	return initRank("ncclCommInitRankScalable", comm, nranks, ids, rank, (*C.char)(cfg))
}

func xCommInitAll(comms *C.ncclComm_t, ndev C.int, devlist *C.int) C.ncclResult_t {
	if comms == nil {
		return nullArg("ncclCommInitAll", "comm")
	}
	var devs []int
	if devlist != nil && ndev > 0 {
		for _, d := range unsafe.Slice(devlist, int(ndev)) {
			devs = append(devs, int(d))
		}
	}
	hs, err := lib().InitAll(int(ndev), devs)
	if err != nil {
		return res(err)
	}
	out := unsafe.Slice(comms, int(ndev))
	for i, h := range hs {
		out[i] = commOf(h)
	}
	return C.ncclResult_t(0)
}

func xCommFinalize(c C.ncclComm_t) C.ncclResult_t {
	return res(lib().Finalize(handle(c)))
}

func xCommDestroy(c C.ncclComm_t) C.ncclResult_t {
	profileStop() // FLEXLINK_CPU_PROFILE (profile.go)
	return res(lib().Destroy(handle(c)))
}
func xCommAbort(c C.ncclComm_t) C.ncclResult_t {
	if c == nil {
		return C.ncclResult_t(0) // NCCL: aborting NULL is a no-op
	}
	return res(lib().Abort(handle(c)))
}

func xCommSplit(c C.ncclComm_t, color, key C.int, out *C.ncclComm_t, cfg unsafe.Pointer) C.ncclResult_t {
	if out == nil {
		return nullArg("ncclCommSplit", "newcomm")
	}
	*out = nil
	conf, err := config((*C.char)(cfg))
	if err != nil {
		return res(fmt.Errorf("ncclCommSplit: %w", err))
	}
	h, err := lib().Split(tid(), handle(c), int(color), int(key), conf)
	if h != 0 {
		*out = commOf(h)
	}
	return res(err)
}

func xCommShrink(c C.ncclComm_t, exclude *C.int, n C.int, out *C.ncclComm_t, cfg unsafe.Pointer, flags C.int) C.ncclResult_t {
	if out == nil {
		return nullArg("ncclCommShrink", "newcomm")
	}
	*out = nil
	if n < 0 || n > 0 && exclude == nil {
		return res(&capi.Error{Code: capi.InvalidArgument, Err: fmt.Errorf("ncclCommShrink: %d ranks to exclude from a NULL list", int(n))})
	}
	conf, err := config((*C.char)(cfg))
	if err != nil {
		return res(fmt.Errorf("ncclCommShrink: %w", err))
	}
	ex := make([]int, int(n))
	for i, r := range unsafe.Slice((*C.int)(exclude), int(n)) {
		ex[i] = int(r)
	}
	h, err := lib().Shrink(tid(), handle(c), ex, conf, int(flags))
	if h != 0 {
		*out = commOf(h)
	}
	return res(err)
}

func xCommGetAsyncError(c C.ncclComm_t, out *C.ncclResult_t) C.ncclResult_t {
	if out == nil {
		return nullArg("ncclCommGetAsyncError", "asyncError")
	}
	r, err := lib().AsyncError(handle(c))
	if err != nil {
		return res(err)
	}
	*out = C.ncclResult_t(r)
	return C.ncclResult_t(0)
}

func info(fn string, c C.ncclComm_t, out *C.int, pick func(n, r, d int) int) C.ncclResult_t {
	if out == nil {
		return nullArg(fn, "output")
	}
	n, r, d, err := lib().Info(handle(c), fn)
	if err != nil {
		return res(err)
	}
	*out = C.int(pick(n, r, d))
	return C.ncclResult_t(0)
}

func xCommCount(c C.ncclComm_t, out *C.int) C.ncclResult_t {
	return info("ncclCommCount", c, out, func(n, _, _ int) int { return n })
}
func xCommUserRank(c C.ncclComm_t, out *C.int) C.ncclResult_t {
	return info("ncclCommUserRank", c, out, func(_, r, _ int) int { return r })
}
func xCommCuDevice(c C.ncclComm_t, out *C.int) C.ncclResult_t {
	return info("ncclCommCuDevice", c, out, func(_, _, d int) int { return d })
}
