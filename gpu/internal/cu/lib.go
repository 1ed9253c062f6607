package cu

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flexlink/flexlink/internal/ccall"
	"github.com/flexlink/flexlink/internal/errs"
)

// DefaultLibrary is the driver library Load opens by default.
const DefaultLibrary = "libcuda.so.1"

// sym indexes Lib.fn.
type sym int

const (
	sInit sym = iota
	sDriverGetVersion
	sGetErrorName
	sGetErrorString
	sDeviceGetCount
	sDeviceGet
	sDeviceGetName
	sDeviceGetAttribute
	sDeviceGetPCIBusID
	sDeviceTotalMem
	sDeviceCanAccessPeer
	sPrimaryCtxRetain
	sPrimaryCtxRelease
	sCtxSetCurrent
	sCtxGetCurrent
	sCtxEnablePeerAccess
	sMemGetInfo
	sMemAlloc
	sMemFree
	sMemHostAlloc
	sMemFreeHost
	sMemHostRegister
	sMemHostUnregister
	sMemHostGetDevicePointer
	sMemcpyHtoDAsync
	sMemcpyDtoHAsync
	sMemcpyAsync
	sMemcpyPeerAsync
	sMemsetD8Async
	sStreamCreate
	sStreamDestroy
	sStreamSynchronize
	sStreamQuery
	sStreamWaitEvent
	sEventCreate
	sEventDestroy
	sEventRecord
	sEventSynchronize
	sEventQuery
	sEventElapsedTime
	sIpcGetMemHandle
	sIpcOpenMemHandle
	sIpcCloseMemHandle
	sIpcGetEventHandle
	sIpcOpenEventHandle
	sModuleLoadData
	sModuleUnload
	sModuleGetFunction
	sLaunchKernel
	sFuncGetAttribute
	sStreamGetCaptureInfo
	sThreadExchangeStreamCaptureMode
	sEventRecordWithFlags
	sLaunchHostFunc
	sUserObjectCreate
	sUserObjectRelease
	sGraphRetainUserObject
	sStreamBeginCapture
	sStreamEndCapture
	sGraphInstantiate
	sGraphLaunch
	sGraphDestroy
	sGraphExecDestroy
	sStreamWriteValue32
	sStreamWaitValue32
	sGraphAddEventRecordNode
	numSyms
)

// symbols lists, for each entry point, the exported names to try, newest
// ABI first (cuda.h maps the plain names to these versioned ones). The first
// name is the one errors report, without its suffix.
func symbols() [numSyms][]string {
	return [numSyms][]string{
		sInit:                    {"cuInit"},
		sDriverGetVersion:        {"cuDriverGetVersion"},
		sGetErrorName:            {"cuGetErrorName"},
		sGetErrorString:          {"cuGetErrorString"},
		sDeviceGetCount:          {"cuDeviceGetCount"},
		sDeviceGet:               {"cuDeviceGet"},
		sDeviceGetName:           {"cuDeviceGetName"},
		sDeviceGetAttribute:      {"cuDeviceGetAttribute"},
		sDeviceGetPCIBusID:       {"cuDeviceGetPCIBusId"},
		sDeviceTotalMem:          {"cuDeviceTotalMem_v2"},
		sDeviceCanAccessPeer:     {"cuDeviceCanAccessPeer"},
		sPrimaryCtxRetain:        {"cuDevicePrimaryCtxRetain"},
		sPrimaryCtxRelease:       {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"},
		sCtxSetCurrent:           {"cuCtxSetCurrent"},
		sCtxGetCurrent:           {"cuCtxGetCurrent"},
		sCtxEnablePeerAccess:     {"cuCtxEnablePeerAccess"},
		sMemGetInfo:              {"cuMemGetInfo_v2"},
		sMemAlloc:                {"cuMemAlloc_v2"},
		sMemFree:                 {"cuMemFree_v2"},
		sMemHostAlloc:            {"cuMemHostAlloc"},
		sMemFreeHost:             {"cuMemFreeHost"},
		sMemHostRegister:         {"cuMemHostRegister_v2", "cuMemHostRegister"},
		sMemHostUnregister:       {"cuMemHostUnregister"},
		sMemHostGetDevicePointer: {"cuMemHostGetDevicePointer_v2"},
		sMemcpyHtoDAsync:         {"cuMemcpyHtoDAsync_v2"},
		sMemcpyDtoHAsync:         {"cuMemcpyDtoHAsync_v2"},
		sMemcpyAsync:             {"cuMemcpyAsync"},
		sMemcpyPeerAsync:         {"cuMemcpyPeerAsync"},
		sMemsetD8Async:           {"cuMemsetD8Async"},
		sStreamCreate:            {"cuStreamCreate"},
		sStreamDestroy:           {"cuStreamDestroy_v2"},
		sStreamSynchronize:       {"cuStreamSynchronize"},
		sStreamQuery:             {"cuStreamQuery"},
		sStreamWaitEvent:         {"cuStreamWaitEvent"},
		sEventCreate:             {"cuEventCreate"},
		sEventDestroy:            {"cuEventDestroy_v2"},
		sEventRecord:             {"cuEventRecord"},
		sEventSynchronize:        {"cuEventSynchronize"},
		sEventQuery:              {"cuEventQuery"},
		sEventElapsedTime:        {"cuEventElapsedTime_v2", "cuEventElapsedTime"},
		sIpcGetMemHandle:         {"cuIpcGetMemHandle"},
		sIpcOpenMemHandle:        {"cuIpcOpenMemHandle_v2"},
		sIpcCloseMemHandle:       {"cuIpcCloseMemHandle"},
		sIpcGetEventHandle:       {"cuIpcGetEventHandle"},
		sIpcOpenEventHandle:      {"cuIpcOpenEventHandle"},
		sModuleLoadData:          {"cuModuleLoadData"},
		sModuleUnload:            {"cuModuleUnload"},
		sModuleGetFunction:       {"cuModuleGetFunction"},
		sLaunchKernel:            {"cuLaunchKernel"},
		sFuncGetAttribute:        {"cuFuncGetAttribute"},
		// CUDA 12.3 added _v3 (edge data); CUDA 13's plain name is it.
		sStreamGetCaptureInfo:            {"cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2"},
		sThreadExchangeStreamCaptureMode: {"cuThreadExchangeStreamCaptureMode"},
		sEventRecordWithFlags:            {"cuEventRecordWithFlags"},
		sLaunchHostFunc:                  {"cuLaunchHostFunc"},
		sUserObjectCreate:                {"cuUserObjectCreate"},
		sUserObjectRelease:               {"cuUserObjectRelease"},
		sGraphRetainUserObject:           {"cuGraphRetainUserObject"},
		sStreamBeginCapture:              {"cuStreamBeginCapture_v2"},
		sStreamEndCapture:                {"cuStreamEndCapture"},
		sGraphInstantiate:                {"cuGraphInstantiateWithFlags"},
		sGraphLaunch:                     {"cuGraphLaunch"},
		sGraphDestroy:                    {"cuGraphDestroy"},
		sGraphExecDestroy:                {"cuGraphExecDestroy"},
		sStreamWriteValue32:              {"cuStreamWriteValue32_v2", "cuStreamWriteValue32"},
		sStreamWaitValue32:               {"cuStreamWaitValue32_v2", "cuStreamWaitValue32"},
		sGraphAddEventRecordNode:         {"cuGraphAddEventRecordNode"},
	}
}

// Lib is the CUDA driver loaded from a shared library. It implements API.
// Its zero value is not usable; get one from Load.
type Lib struct {
	path  string
	names [numSyms]string // resolved symbol, for errors and Symbols
	fn    [numSyms]uintptr
	// The two IPC "open" calls take a 64-byte struct by value, which purego's
	// reflective caller lays out on the stack per the C ABI.
	ipcOpenMem   func(p *DevPtr, h IPCHandle, flags uint32) Result
	ipcOpenEvent func(e *Event, h IPCHandle) Result
	funcLoad     uintptr // cuFuncLoad (CUDA 12.4+); 0 on older drivers (FuncLoad queries an attribute instead)
}

// Load opens the driver library at path (DefaultLibrary when empty),
// resolves every entry point flexlink uses and calls cuInit(0).
//
// When the library cannot be opened, the error wraps errs.ErrNotSupported
// and keeps dlopen's message ("no libcuda: libcuda.so.1: cannot open shared
// object file: No such file or directory"). A library that lacks an entry
// point (a driver older than CUDA 12) also wraps errs.ErrNotSupported; so
// does cuInit's CUDA_ERROR_NO_DEVICE.
//
// The library is never unloaded: the driver keeps threads and state that do
// not survive dlclose.
func Load(path string) (*Lib, error) {
	if path == "" {
		path = DefaultLibrary
	}
	// dlerror is per thread: stay on dlopen's thread so its message is
	// kept (a migration between the two lost it: "no libcuda: : ...").
	runtime.LockOSThread()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("no libcuda: %s: %w", err.Error(), errs.ErrNotSupported)
	}
	l := &Lib{path: path}
	for s, cands := range symbols() {
		for _, name := range cands {
			if p, err := purego.Dlsym(h, name); err == nil && p != 0 {
				l.fn[s], l.names[s] = p, name
				break
			}
		}
		if l.fn[s] == 0 {
			return nil, fmt.Errorf("%s has no %s (driver older than CUDA 12?): %w",
				path, strings.Join(cands, " or "), errs.ErrNotSupported)
		}
	}
	if p, err := purego.Dlsym(h, "cuFuncLoad"); err == nil {
		l.funcLoad = p
	}
	purego.RegisterFunc(&l.ipcOpenMem, l.fn[sIpcOpenMemHandle])
	purego.RegisterFunc(&l.ipcOpenEvent, l.fn[sIpcOpenEventHandle])
	if err := l.call(sInit, 0); err != nil {
		return nil, err
	}
	return l, nil
}

// Path is the library Load opened.
func (l *Lib) Path() string { return l.path }

// Symbols lists the resolved entry points (versioned names), for reports.
func (l *Lib) Symbols() []string { return append([]string(nil), l.names[:]...) }

// call invokes entry point s and turns its CUresult into an error.
//
//go:uintptrescapes
func (l *Lib) call(s sym, args ...uintptr) error {
	r := ccall.Call(l.fn[s], args...)
	return l.check(s, Result(int32(uint32(r))))
}

// FuncLoad loads f now: cuFuncLoad where the driver has it, otherwise a
// query of the function's register count, which loads it too.
func (l *Lib) FuncLoad(f Function) error {
	if l.funcLoad != 0 {
		r, _, _ := purego.SyscallN(l.funcLoad, uintptr(f))
		return l.checkNamed("cuFuncLoad", Result(int32(uint32(r))))
	}
	var v int32
	return l.call(sFuncGetAttribute, uintptr(unsafe.Pointer(&v)), funcAttributeNumRegs, uintptr(f))
}

// funcAttributeNumRegs is CU_FUNC_ATTRIBUTE_NUM_REGS.
const funcAttributeNumRegs = 4

// check builds the *Error for a result, asking the driver for its name and
// description.
func (l *Lib) check(s sym, r Result) error {
	if r == Success { // before symbols(), which builds its whole table
		return nil
	}
	return l.checkNamed(baseName(symbols()[s][0]), r)
}

// checkNamed is check for an entry point named fn.
func (l *Lib) checkNamed(fn string, r Result) error {
	if r == Success {
		return nil
	}
	e := &Error{Func: fn, Code: r}
	e.Name = l.errorText(sGetErrorName, r)
	e.Desc = l.errorText(sGetErrorString, r)
	if e.Name == "" {
		e.Name = fmt.Sprintf("CUDA_ERROR_%d", int32(r))
	}
	if e.Desc == "" {
		e.Desc = "unknown error"
	}
	return e
}

func (l *Lib) errorText(s sym, r Result) string {
	var p *byte
	if rc, _, _ := purego.SyscallN(l.fn[s], uintptr(r), uintptr(unsafe.Pointer(&p))); rc != 0 || p == nil {
		return ""
	}
	return goString(p, 512)
}

// goString copies a NUL-terminated C string (at most max bytes).
func goString(p *byte, max int) string {
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// baseName strips a _v2-style suffix: cuMemAlloc_v2 -> cuMemAlloc.
func baseName(s string) string {
	if i := strings.LastIndex(s, "_v"); i > 0 {
		return s[:i]
	}
	return s
}

var _ API = (*Lib)(nil)
