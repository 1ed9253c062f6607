#!/usr/bin/env python3
"""Writes exports.go: every nccl* entry point and its pnccl* alias as a cgo
//export wrapper around the x* implementation, and symbols.txt, the sorted
list of exported names (capi's TestCLibrary checks it against the library
and against nccl-2.30.symbols, NCCL 2.30's list).
Run: python3 gen_exports.py && gofmt -w exports.go

Each entry is (name, C parameters in Go syntax, Go result type or "" for
void, options); option "noprof" exports no pnccl* alias (NCCL exports
ncclResetDebugInitInternal alone)."""

SIGS = [
    ("GetVersion", "v *C.int", "C.ncclResult_t"),
    ("GetUniqueId", "id *C.ncclUniqueId", "C.ncclResult_t"),
    ("GetErrorString", "r C.ncclResult_t", "*C.char"),
    ("GetLastError", "c C.ncclComm_t", "*C.char"),
    ("MemAlloc", "p *unsafe.Pointer, size C.size_t", "C.ncclResult_t"),
    ("MemFree", "p unsafe.Pointer", "C.ncclResult_t"),
    ("CommInitRank", "comm *C.ncclComm_t, nranks C.int, id C.ncclUniqueId, rank C.int", "C.ncclResult_t"),
    ("CommInitRankConfig", "comm *C.ncclComm_t, nranks C.int, id C.ncclUniqueId, rank C.int, cfg unsafe.Pointer", "C.ncclResult_t"),
    ("CommInitRankScalable", "comm *C.ncclComm_t, nranks, rank, nID C.int, ids *C.ncclUniqueId, cfg unsafe.Pointer", "C.ncclResult_t"),
    ("CommInitAll", "comms *C.ncclComm_t, ndev C.int, devlist *C.int", "C.ncclResult_t"),
    ("CommFinalize", "c C.ncclComm_t", "C.ncclResult_t"),
    ("CommDestroy", "c C.ncclComm_t", "C.ncclResult_t"),
    ("CommAbort", "c C.ncclComm_t", "C.ncclResult_t"),
    ("CommSplit", "c C.ncclComm_t, color, key C.int, out *C.ncclComm_t, cfg unsafe.Pointer", "C.ncclResult_t"),
    ("CommShrink", "c C.ncclComm_t, exclude *C.int, n C.int, out *C.ncclComm_t, cfg unsafe.Pointer, flags C.int", "C.ncclResult_t"),
    ("CommGetAsyncError", "c C.ncclComm_t, out *C.ncclResult_t", "C.ncclResult_t"),
    ("CommCount", "c C.ncclComm_t, out *C.int", "C.ncclResult_t"),
    ("CommCuDevice", "c C.ncclComm_t, out *C.int", "C.ncclResult_t"),
    ("CommUserRank", "c C.ncclComm_t, out *C.int", "C.ncclResult_t"),
    ("CommRegister", "c C.ncclComm_t, buf unsafe.Pointer, size C.size_t, h *unsafe.Pointer", "C.ncclResult_t"),
    ("CommDeregister", "c C.ncclComm_t, h unsafe.Pointer", "C.ncclResult_t"),
    ("CommWindowRegister", "c C.ncclComm_t, buf unsafe.Pointer, size C.size_t, win *C.ncclWindow_t, flags C.int", "C.ncclResult_t"),
    ("CommWindowDeregister", "c C.ncclComm_t, win C.ncclWindow_t", "C.ncclResult_t"),
    ("DevCommCreate", "c C.ncclComm_t, reqs unsafe.Pointer, out unsafe.Pointer", "C.ncclResult_t"),
    ("DevCommDestroy", "c C.ncclComm_t, dc unsafe.Pointer", "C.ncclResult_t"),
    ("RedOpCreatePreMulSum", "op *C.ncclRedOp_t, scalar unsafe.Pointer, dt C.ncclDataType_t, residence C.ncclScalarResidence_t, c C.ncclComm_t", "C.ncclResult_t"),
    ("RedOpDestroy", "op C.ncclRedOp_t, c C.ncclComm_t", "C.ncclResult_t"),
    ("Reduce", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, root C.int, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("Bcast", "b unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("Broadcast", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("AllReduce", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("ReduceScatter", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("AllGather", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("AlltoAll", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("Gather", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("Scatter", "s, r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, root C.int, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("Send", "s unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, peer C.int, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("Recv", "r unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, peer C.int, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("GroupStart", "", "C.ncclResult_t"),
    ("GroupEnd", "", "C.ncclResult_t"),
    ("GroupSimulateEnd", "info unsafe.Pointer", "C.ncclResult_t"),
    # NCCL 2.28.9
    ("CommRevoke", "c C.ncclComm_t, flags C.int", "C.ncclResult_t"),
    ("ResetDebugInit", "", ""),
    ("ResetDebugInitInternal", "", "", "noprof"),
    # NCCL 2.29
    ("CommGetUniqueId", "c C.ncclComm_t, id *C.ncclUniqueId", "C.ncclResult_t"),
    ("CommGrow", "c C.ncclComm_t, nranks C.int, id *C.ncclUniqueId, rank C.int, out *C.ncclComm_t, cfg unsafe.Pointer", "C.ncclResult_t"),
    ("CommSuspend", "c C.ncclComm_t, flags C.int", "C.ncclResult_t"),
    ("CommResume", "c C.ncclComm_t", "C.ncclResult_t"),
    ("CommMemStats", "c C.ncclComm_t, stat C.int, value *C.uint64_t", "C.ncclResult_t"),
    ("WinGetUserPtr", "c C.ncclComm_t, win C.ncclWindow_t, out *unsafe.Pointer", "C.ncclResult_t"),
    ("PutSignal", "s unsafe.Pointer, n C.size_t, dt C.ncclDataType_t, peer C.int, win C.ncclWindow_t, off C.size_t, sig, ctx C.int, flags C.uint, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("Signal", "peer, sig, ctx C.int, flags C.uint, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    ("WaitSignal", "n C.int, descs unsafe.Pointer, c C.ncclComm_t, st C.cudaStream_t", "C.ncclResult_t"),
    # NCCL 2.30: parameters
    ("ParamBind", "out *C.ncclParamHandle_t, key *C.char", "C.ncclResult_t"),
    ("ParamGetI8", "h C.ncclParamHandle_t, out *C.int8_t", "C.ncclResult_t"),
    ("ParamGetI16", "h C.ncclParamHandle_t, out *C.int16_t", "C.ncclResult_t"),
    ("ParamGetI32", "h C.ncclParamHandle_t, out *C.int32_t", "C.ncclResult_t"),
    ("ParamGetI64", "h C.ncclParamHandle_t, out *C.int64_t", "C.ncclResult_t"),
    ("ParamGetU8", "h C.ncclParamHandle_t, out *C.uint8_t", "C.ncclResult_t"),
    ("ParamGetU16", "h C.ncclParamHandle_t, out *C.uint16_t", "C.ncclResult_t"),
    ("ParamGetU32", "h C.ncclParamHandle_t, out *C.uint32_t", "C.ncclResult_t"),
    ("ParamGetU64", "h C.ncclParamHandle_t, out *C.uint64_t", "C.ncclResult_t"),
    ("ParamGetStr", "h C.ncclParamHandle_t, out **C.char", "C.ncclResult_t"),
    ("ParamGet", "h C.ncclParamHandle_t, out unsafe.Pointer, maxLen C.int, n *C.int", "C.ncclResult_t"),
    ("ParamGetParameter", "key *C.char, value **C.char, n *C.int", "C.ncclResult_t"),
    ("ParamGetAllParameterKeys", "table ***C.char, n *C.int", "C.ncclResult_t"),
    ("ParamDumpAll", "", ""),
    # NCCL's device API, host side (nccl_device.h; 2.28 and 2.29)
    ("CommQueryProperties", "c C.ncclComm_t, props unsafe.Pointer", "C.ncclResult_t"),
    ("GetLsaMultimemDevicePointer", "win C.ncclWindow_t, off C.size_t, out *unsafe.Pointer", "C.ncclResult_t"),
    ("GetMultimemDevicePointer", "win C.ncclWindow_t, off C.size_t, mm C.ncclMultimemHandle_t, out *unsafe.Pointer", "C.ncclResult_t"),
    ("GetLsaDevicePointer", "win C.ncclWindow_t, off C.size_t, lsaRank C.int, out *unsafe.Pointer", "C.ncclResult_t"),
    ("GetPeerDevicePointer", "win C.ncclWindow_t, off C.size_t, peer C.int, out *unsafe.Pointer", "C.ncclResult_t"),
    ("TeamWorld", "c C.ncclComm_t", "C.ncclTeam_t"),
    ("TeamLsa", "c C.ncclComm_t", "C.ncclTeam_t"),
    ("TeamRail", "c C.ncclComm_t", "C.ncclTeam_t"),
    ("TeamRankToWorld", "c C.ncclComm_t, team C.ncclTeam_t, rank C.int", "C.int"),
    ("TeamRankToLsa", "c C.ncclComm_t, team C.ncclTeam_t, rank C.int", "C.int"),
    ("GinBarrierCreateRequirement", "c C.ncclComm_t, team C.ncclTeam_t, n C.int, h, req unsafe.Pointer", "C.ncclResult_t"),
    ("GinOutboxCreateRequirement", "nBlocks, sizeLog2 C.int, h, req unsafe.Pointer", "C.ncclResult_t"),
    ("GinInboxA2ACreateRequirement", "peers C.ncclTeam_t, nBlocks, sizeLog2 C.int, h, req unsafe.Pointer", "C.ncclResult_t"),
    ("LLA2ACalcSlots", "maxElts, maxEltSize C.int", "C.int"),
    ("LLA2ACreateRequirement", "nBlocks, nSlots C.int, h, req unsafe.Pointer", "C.ncclResult_t"),
    ("LsaBarrierCreateRequirement", "team C.ncclTeam_t, n C.int, h, req unsafe.Pointer", "C.ncclResult_t"),
]


def names(params):
    out = []
    for group in params.split(","):
        group = group.strip()
        if not group:
            continue
        out.append(group.split()[0])
    return out


lines = [
    "// Code generated by gen_exports.py; DO NOT EDIT.",
    "",
    "package main",
    "",
    "/*",
    '#include "api.h"',
    "*/",
    'import "C"',
    "",
    'import "unsafe"',
    "",
    "var _ unsafe.Pointer",
    "",
]


def prefixes(entry):
    return ("nccl",) if "noprof" in entry[3:] else ("nccl", "pnccl")


for entry in SIGS:
    name, params, ret = entry[:3]
    args = ", ".join(names(params))
    for prefix in prefixes(entry):
        lines.append(f"//export {prefix}{name}")
        if ret:
            lines.append(f"func {prefix}{name}({params}) {ret} {{ return x{name}({args}) }}")
        else:
            lines.append(f"func {prefix}{name}({params}) {{ x{name}({args}) }}")
        lines.append("")
open("exports.go", "w").write("\n".join(lines))
open("symbols.txt", "w").write("\n".join(sorted(p + e[0] for e in SIGS for p in prefixes(e))) + "\n")
