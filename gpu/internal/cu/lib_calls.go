package cu

import (
	"unsafe"
)

// The API methods of Lib: one driver call each. Pointers handed to the
// driver as uintptr are converted in the argument list of l.call, which is
// marked go:uintptrescapes, so what they point at lives on the heap for the
// duration of the call.

func bool32(v int32) bool { return v != 0 }

// DriverVersion returns the CUDA version the driver supports, e.g. 13000.
func (l *Lib) DriverVersion() (int, error) {
	var v int32
	err := l.call(sDriverGetVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

func (l *Lib) DeviceCount() (int, error) {
	var n int32
	err := l.call(sDeviceGetCount, uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

func (l *Lib) DeviceGet(ordinal int) (Device, error) {
	var d Device
	err := l.call(sDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal))
	return d, err
}

func (l *Lib) DeviceName(d Device) (string, error) {
	buf := make([]byte, 256)
	if err := l.call(sDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d)); err != nil {
		return "", err
	}
	return cString(buf), nil
}

func (l *Lib) DeviceAttribute(a Attr, d Device) (int, error) {
	var v int32
	err := l.call(sDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d))
	return int(v), err
}

func (l *Lib) DevicePCIBusID(d Device) (string, error) {
	buf := make([]byte, 64)
	if err := l.call(sDeviceGetPCIBusID, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d)); err != nil {
		return "", err
	}
	return cString(buf), nil
}

func (l *Lib) DeviceTotalMem(d Device) (uint64, error) {
	var n uint64
	err := l.call(sDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(d))
	return n, err
}

func (l *Lib) DeviceCanAccessPeer(d, peer Device) (bool, error) {
	var v int32
	err := l.call(sDeviceCanAccessPeer, uintptr(unsafe.Pointer(&v)), uintptr(d), uintptr(peer))
	return bool32(v), err
}

func (l *Lib) PrimaryCtxRetain(d Device) (Context, error) {
	var c Context
	err := l.call(sPrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(d))
	return c, err
}

func (l *Lib) PrimaryCtxRelease(d Device) error { return l.call(sPrimaryCtxRelease, uintptr(d)) }

func (l *Lib) CtxSetCurrent(c Context) error { return l.call(sCtxSetCurrent, uintptr(c)) }

func (l *Lib) CtxGetCurrent() (Context, error) {
	var c Context
	err := l.call(sCtxGetCurrent, uintptr(unsafe.Pointer(&c)))
	return c, err
}

func (l *Lib) CtxEnablePeerAccess(peer Context) error {
	return l.call(sCtxEnablePeerAccess, uintptr(peer), 0)
}

func (l *Lib) MemGetInfo() (free, total uint64, err error) {
	err = l.call(sMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))
	return free, total, err
}

func (l *Lib) MemAlloc(n uint64) (DevPtr, error) {
	var p DevPtr
	err := l.call(sMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))
	return p, err
}

func (l *Lib) MemFree(p DevPtr) error { return l.call(sMemFree, uintptr(p)) }

func (l *Lib) MemHostAlloc(n uint64, flags uint32) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := l.call(sMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), uintptr(flags))
	return p, err
}

func (l *Lib) MemFreeHost(p unsafe.Pointer) error { return l.call(sMemFreeHost, uintptr(p)) }

func (l *Lib) MemHostRegister(p unsafe.Pointer, n uint64, flags uint32) error {
	return l.call(sMemHostRegister, uintptr(p), uintptr(n), uintptr(flags))
}

func (l *Lib) MemHostUnregister(p unsafe.Pointer) error {
	return l.call(sMemHostUnregister, uintptr(p))
}

func (l *Lib) MemHostGetDevicePointer(p unsafe.Pointer) (DevPtr, error) {
	var d DevPtr
	err := l.call(sMemHostGetDevicePointer, uintptr(unsafe.Pointer(&d)), uintptr(p), 0)
	return d, err
}

func (l *Lib) MemcpyHtoDAsync(dst DevPtr, src unsafe.Pointer, n uint64, s Stream) error {
	return l.call(sMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

func (l *Lib) MemcpyDtoHAsync(dst unsafe.Pointer, src DevPtr, n uint64, s Stream) error {
	return l.call(sMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

func (l *Lib) MemcpyAsync(dst, src DevPtr, n uint64, s Stream) error {
	return l.call(sMemcpyAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

func (l *Lib) MemcpyPeerAsync(dst DevPtr, dstCtx Context, src DevPtr, srcCtx Context, n uint64, s Stream) error {
	return l.call(sMemcpyPeerAsync, uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(n), uintptr(s))
}

func (l *Lib) MemsetD8Async(dst DevPtr, v uint8, n uint64, s Stream) error {
	return l.call(sMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
}

func (l *Lib) StreamCreate(flags uint32) (Stream, error) {
	var s Stream
	err := l.call(sStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags))
	return s, err
}

func (l *Lib) StreamDestroy(s Stream) error     { return l.call(sStreamDestroy, uintptr(s)) }
func (l *Lib) StreamSynchronize(s Stream) error { return l.call(sStreamSynchronize, uintptr(s)) }

func (l *Lib) StreamQuery(s Stream) (bool, error) {
	return ready(l.call(sStreamQuery, uintptr(s)))
}

func (l *Lib) StreamWaitEvent(s Stream, e Event) error {
	return l.call(sStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

func (l *Lib) EventCreate(flags uint32) (Event, error) {
	var e Event
	err := l.call(sEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return e, err
}

func (l *Lib) EventDestroy(e Event) error { return l.call(sEventDestroy, uintptr(e)) }
func (l *Lib) EventRecord(e Event, s Stream) error {
	return l.call(sEventRecord, uintptr(e), uintptr(s))
}
func (l *Lib) EventSynchronize(e Event) error   { return l.call(sEventSynchronize, uintptr(e)) }
func (l *Lib) EventQuery(e Event) (bool, error) { return ready(l.call(sEventQuery, uintptr(e))) }
func (l *Lib) IpcCloseMemHandle(p DevPtr) error { return l.call(sIpcCloseMemHandle, uintptr(p)) }
func (l *Lib) ModuleUnload(m Module) error      { return l.call(sModuleUnload, uintptr(m)) }

// ready maps a query's result: success is done, CUDA_ERROR_NOT_READY is
// pending, anything else is an error.
func ready(err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	if Is(err, ErrorNotReady) {
		return false, nil
	}
	return false, err
}

func (l *Lib) EventElapsedTime(a, b Event) (float32, error) {
	var ms float32
	err := l.call(sEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(a), uintptr(b))
	return ms, err
}

func (l *Lib) IpcGetMemHandle(p DevPtr) (IPCHandle, error) {
	var h IPCHandle
	err := l.call(sIpcGetMemHandle, uintptr(unsafe.Pointer(&h)), uintptr(p))
	return h, err
}

func (l *Lib) IpcOpenMemHandle(h IPCHandle, flags uint32) (DevPtr, error) {
	var p DevPtr
	err := l.check(sIpcOpenMemHandle, l.ipcOpenMem(&p, h, flags))
	return p, err
}

func (l *Lib) IpcGetEventHandle(e Event) (IPCHandle, error) {
	var h IPCHandle
	err := l.call(sIpcGetEventHandle, uintptr(unsafe.Pointer(&h)), uintptr(e))
	return h, err
}

func (l *Lib) IpcOpenEventHandle(h IPCHandle) (Event, error) {
	var e Event
	err := l.check(sIpcOpenEventHandle, l.ipcOpenEvent(&e, h))
	return e, err
}

func (l *Lib) ModuleLoadData(image []byte) (Module, error) {
	img := make([]byte, len(image)+1) // the driver reads PTX up to a NUL
	copy(img, image)
	var m Module
	err := l.call(sModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])))
	return m, err
}

func (l *Lib) ModuleGetFunction(m Module, name string) (Function, error) {
	cname := append([]byte(name), 0)
	var f Function
	err := l.call(sModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	return f, err
}

func (l *Lib) LaunchKernel(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, params []unsafe.Pointer) error {
	var pp *unsafe.Pointer
	if len(params) > 0 {
		pp = &params[0]
	}
	return l.call(sLaunchKernel, uintptr(f),
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		uintptr(sharedMem), uintptr(s), uintptr(unsafe.Pointer(pp)), 0)
}

// cString returns buf up to its first NUL.
func cString(buf []byte) string {
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i])
		}
	}
	return string(buf)
}
