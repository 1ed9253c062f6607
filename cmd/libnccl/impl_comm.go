package main

/*
#include <stdlib.h>
#include "api.h"
*/
import "C"

import (
	"sync/atomic"
	"unsafe"

	"github.com/flexlink/flexlink/capi"
	"github.com/flexlink/flexlink/internal/settings"
)

// Communicator entry points of NCCL 2.28.9 and 2.29 and the logging reset.

func xCommRevoke(c C.ncclComm_t, flags C.int) C.ncclResult_t {
	return res(lib().Revoke(handle(c), int(flags)))
}

func xCommSuspend(c C.ncclComm_t, flags C.int) C.ncclResult_t {
	return res(lib().Suspend(handle(c), int(flags)))
}

func xCommResume(c C.ncclComm_t) C.ncclResult_t { return res(lib().Resume(handle(c))) }

func xCommMemStats(c C.ncclComm_t, stat C.int, value *C.uint64_t) C.ncclResult_t {
	return unsupported("ncclCommMemStats", "flexlink does not count its GPU memory per communicator (docs/GPU.md gives the figures)")
}

func xCommGetUniqueId(c C.ncclComm_t, id *C.ncclUniqueId) C.ncclResult_t {
	return unsupported("ncclCommGetUniqueId", "its id is for ncclCommGrow, which flexlink does not serve")
}

func xCommGrow(c C.ncclComm_t, nranks C.int, id *C.ncclUniqueId, rank C.int, out *C.ncclComm_t, cfg unsafe.Pointer) C.ncclResult_t {
	if out != nil {
		*out = nil
	}
	return unsupported("ncclCommGrow", "a communicator cannot take new ranks; make a new one with ncclCommInitRank")
}

// debugEnv is the environment the library reads (capi.Options.Env): the
// process's C environment (cEnv), with NCCL's logging variables as they were at the first call
// or at the last ncclResetDebugInit (capi.DebugEnv).
var debugEnv atomic.Pointer[settings.Env]

// takeDebugEnv reads NCCL's logging variables again.
func takeDebugEnv() {
	e := capi.DebugEnv(cEnv)
	debugEnv.Store(&e)
}

// cEnv reads the C environment: a C program's setenv after the library
// was loaded is not in the copy the Go runtime took when it started, and
// what a program sets before ncclResetDebugInit must count.
func cEnv(k string) (string, bool) {
	ck := C.CString(k)
	defer C.free(unsafe.Pointer(ck))
	v := C.getenv(ck)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}

// libEnv is a settings.Env over the latest debugEnv.
func libEnv(k string) (string, bool) { return (*debugEnv.Load())(k) }

// xResetDebugInit is ncclResetDebugInit: NCCL_DEBUG, NCCL_DEBUG_SUBSYS
// and NCCL_DEBUG_FILE are read again. The library's own logger takes the
// new level, the NCCL_DEBUG=INFO announcement follows it, and
// communicators made from now on log as the variables now say; those that
// exist keep their loggers (see docs/NCCL-API.md).
func xResetDebugInit() {
	l := lib() // takes the first debugEnv if this is the first call
	takeDebugEnv()
	l.ResetDebug()
}

func xResetDebugInitInternal() { xResetDebugInit() }
