package main

/*
#include <stdlib.h>
#include "helpers.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/flexlink/flexlink/capi"
)

const ok = C.ncclResult_t(0)

func xMemAlloc(p *unsafe.Pointer, size C.size_t) C.ncclResult_t {
	if p == nil {
		return nullArg("ncclMemAlloc", "ptr")
	}
	l := lib()
	if !l.HasGPU() {
		// Host-buffer extension: without a GPU, "device" memory is host
		// memory, which every call here accepts.
		m := C.aligned_alloc(4096, (size+4095)/4096*4096)
		if m == nil {
			return res(&capi.Error{Code: capi.SystemError, Err: fmt.Errorf("ncclMemAlloc: out of host memory (%d bytes)", uint64(size))})
		}
		*p = m
		return ok
	}
	d, err := l.MemAlloc(int(size))
	if err != nil {
		return res(err)
	}
	*p = C.fl_handle(C.uintptr_t(d))
	return ok
}

func xMemFree(p unsafe.Pointer) C.ncclResult_t {
	if p == nil {
		return ok
	}
	l := lib()
	ours, err := l.MemFree(uintptr(p))
	if err != nil {
		return res(err)
	}
	if !ours {
		if l.HasGPU() {
			return res(&capi.Error{Code: capi.InvalidArgument, Err: fmt.Errorf("ncclMemFree: %p was not allocated by ncclMemAlloc", p)})
		}
		C.free(p)
	}
	return ok
}

func xCommRegister(c C.ncclComm_t, buf unsafe.Pointer, size C.size_t, h *unsafe.Pointer) C.ncclResult_t {
	if h == nil {
		return nullArg("ncclCommRegister", "handle")
	}
	reg, err := lib().Register(handle(c), uintptr(buf), int(size))
	if err != nil {
		return res(err)
	}
	*h = C.fl_handle(C.uintptr_t(reg))
	return ok
}

func xCommDeregister(c C.ncclComm_t, h unsafe.Pointer) C.ncclResult_t {
	return res(lib().Deregister(handle(c), uintptr(C.fl_id(h))))
}

// coll makes call on c for the calling thread, found only when some
// thread has a group open (a cgo call otherwise on every call's path;
// tid 0 names no thread).
func coll(c C.ncclComm_t, call capi.Call) C.ncclResult_t {
	l := lib()
	t := 0
	if l.GroupsOpen() {
		t = tid()
	}
	return res(l.Coll(t, handle(c), call))
}

func xAllReduce(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.AllReduce, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Op: int32(op), Stream: streamOf(st)})
}

func xAllGather(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.AllGather, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Stream: streamOf(st)})
}

func xReduceScatter(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.ReduceScatter, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Op: int32(op), Stream: streamOf(st)})
}

func xAlltoAll(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.AllToAll, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Stream: streamOf(st)})
}

func xBroadcast(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.Broadcast, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Root: int(root), Stream: streamOf(st)})
}

func xBcast(b unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return xBroadcast(b, b, n, dt, root, c, st)
}

func xReduce(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, root C.int, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.Reduce, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Op: int32(op), Root: int(root), Stream: streamOf(st)})
}

func xGather(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.Gather, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Root: int(root), Stream: streamOf(st)})
}

func xScatter(s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.Scatter, Send: s, Recv: r, Count: uint64(n), Type: int32(dt), Root: int(root), Stream: streamOf(st)})
}

func xSend(s unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, peer C.int, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.Send, Send: s, Count: uint64(n), Type: int32(dt), Root: int(peer), Stream: streamOf(st)})
}

func xRecv(r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, peer C.int, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return coll(c, capi.Call{Kind: capi.Recv, Recv: r, Count: uint64(n), Type: int32(dt), Root: int(peer), Stream: streamOf(st)})
}

func xGroupStart() C.ncclResult_t {
	lib().GroupStart(tid())
	return ok
}

func xGroupEnd() C.ncclResult_t { return res(lib().GroupEnd(tid())) }
