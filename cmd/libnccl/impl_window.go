package main

/*
#include "api.h"
*/
import "C"

import (
	"unsafe"

	"github.com/flexlink/flexlink/capi"
)

// windows are the process's ncclCommWindowRegister windows (bookkeeping:
// capi.Windows says what a window is and is not here).
var windows capi.Windows

func xCommWindowRegister(c C.ncclComm_t, buf unsafe.Pointer, size C.size_t, win *C.ncclWindow_t, flags C.int) C.ncclResult_t {
	if win == nil {
		return nullArg("ncclCommWindowRegister", "win")
	}
	*win = nil
	w, err := windows.RegisterWindow(lib(), handle(c), uintptr(buf), int(size), int(flags))
	if err != nil {
		return res(err)
	}
	*win = C.ncclWindow_t(C.fl_handle(C.uintptr_t(w)))
	return ok
}

func xCommWindowDeregister(c C.ncclComm_t, win C.ncclWindow_t) C.ncclResult_t {
	return res(windows.DeregisterWindow(lib(), handle(c), uintptr(C.fl_id(unsafe.Pointer(win)))))
}

func xWinGetUserPtr(c C.ncclComm_t, win C.ncclWindow_t, out *unsafe.Pointer) C.ncclResult_t {
	if out == nil {
		return nullArg("ncclWinGetUserPtr", "outUserPtr")
	}
	p, err := windows.UserPtr(lib(), handle(c), uintptr(C.fl_id(unsafe.Pointer(win))))
	if err != nil {
		return res(err)
	}
	*out = C.fl_handle(C.uintptr_t(p))
	return ok
}

// One-sided operations on windows (NCCL 2.29's host RMA API).

const noRMA = "one-sided puts and signals on windows are not implemented (windows are bookkeeping only; use ncclSend/ncclRecv)"

func xPutSignal(s unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, peer C.int, win C.ncclWindow_t, off C.size_t, sig, ctx C.int, flags C.uint, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return unsupported("ncclPutSignal", noRMA)
}

func xSignal(peer, sig, ctx C.int, flags C.uint, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return unsupported("ncclSignal", noRMA)
}

func xWaitSignal(n C.int, descs unsafe.Pointer, c C.ncclComm_t, st C.cudaStream_t) C.ncclResult_t {
	return unsupported("ncclWaitSignal", noRMA)
}

// The host side of NCCL's device API (nccl_device.h). flexlink has no
// device API: kernels written against it dereference NCCL's own device
// structures. The two team helpers that are plain facts about the
// communicator are served; everything else refuses, naming the function.

const noDeviceAPI = "NCCL's device API (nccl_device.h: device communicators, LSA and multimem pointers, GIN) is not implemented"

func xDevCommCreate(c C.ncclComm_t, reqs unsafe.Pointer, out unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclDevCommCreate", noDeviceAPI)
}

func xDevCommDestroy(c C.ncclComm_t, dc unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclDevCommDestroy", noDeviceAPI)
}

func xCommQueryProperties(c C.ncclComm_t, props unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclCommQueryProperties", noDeviceAPI)
}

func devicePointer(fn string, out *unsafe.Pointer) C.ncclResult_t {
	if out != nil {
		*out = nil
	}
	return unsupported(fn, noDeviceAPI)
}

func xGetLsaMultimemDevicePointer(win C.ncclWindow_t, off C.size_t, out *unsafe.Pointer) C.ncclResult_t {
	return devicePointer("ncclGetLsaMultimemDevicePointer", out)
}

func xGetMultimemDevicePointer(win C.ncclWindow_t, off C.size_t, mm C.ncclMultimemHandle_t, out *unsafe.Pointer) C.ncclResult_t {
	return devicePointer("ncclGetMultimemDevicePointer", out)
}

func xGetLsaDevicePointer(win C.ncclWindow_t, off C.size_t, lsaRank C.int, out *unsafe.Pointer) C.ncclResult_t {
	return devicePointer("ncclGetLsaDevicePointer", out)
}

func xGetPeerDevicePointer(win C.ncclWindow_t, off C.size_t, peer C.int, out *unsafe.Pointer) C.ncclResult_t {
	return devicePointer("ncclGetPeerDevicePointer", out)
}

// xTeamWorld is every rank of the communicator, stride 1. On a bad
// communicator it returns the empty team and ncclGetLastError says why
// (the function has no result code).
func xTeamWorld(c C.ncclComm_t) C.ncclTeam_t {
	n, r, _, err := lib().Info(handle(c), "ncclTeamWorld")
	if err != nil {
		res(err)
		return C.ncclTeam_t{}
	}
	return C.ncclTeam_t{nRanks: C.int(n), rank: C.int(r), stride: 1}
}

func xTeamLsa(c C.ncclComm_t) C.ncclTeam_t {
	unsupported("ncclTeamLsa", noDeviceAPI)
	return C.ncclTeam_t{}
}

func xTeamRail(c C.ncclComm_t) C.ncclTeam_t {
	unsupported("ncclTeamRail", noDeviceAPI)
	return C.ncclTeam_t{}
}

// xTeamRankToWorld is the world rank of the team's rank-th member: the
// caller is the team's member team.rank, members are team.stride world
// ranks apart. -1 on a bad communicator.
func xTeamRankToWorld(c C.ncclComm_t, team C.ncclTeam_t, rank C.int) C.int {
	_, me, _, err := lib().Info(handle(c), "ncclTeamRankToWorld")
	if err != nil {
		res(err)
		return -1
	}
	return C.int(me) + (rank-team.rank)*team.stride
}

func xTeamRankToLsa(c C.ncclComm_t, team C.ncclTeam_t, rank C.int) C.int {
	unsupported("ncclTeamRankToLsa", noDeviceAPI)
	return -1
}

func xGinBarrierCreateRequirement(c C.ncclComm_t, team C.ncclTeam_t, n C.int, h, req unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclGinBarrierCreateRequirement", noDeviceAPI)
}

func xGinOutboxCreateRequirement(nBlocks, sizeLog2 C.int, h, req unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclGinOutboxCreateRequirement", noDeviceAPI)
}

func xGinInboxA2ACreateRequirement(peers C.ncclTeam_t, nBlocks, sizeLog2 C.int, h, req unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclGinInboxA2ACreateRequirement", noDeviceAPI)
}

// xLLA2ACalcSlots is the number of 8-byte slots maxElts elements of
// maxEltSize bytes take in a low-latency all-to-all buffer: arithmetic,
// served though the buffers it sizes are not.
func xLLA2ACalcSlots(maxElts, maxEltSize C.int) C.int {
	return maxElts * ((maxEltSize + 7) / 8)
}

func xLLA2ACreateRequirement(nBlocks, nSlots C.int, h, req unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclLLA2ACreateRequirement", noDeviceAPI)
}

func xLsaBarrierCreateRequirement(team C.ncclTeam_t, n C.int, h, req unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclLsaBarrierCreateRequirement", noDeviceAPI)
}
