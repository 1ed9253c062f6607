// Package cu is flexlink's thin binding of the CUDA driver API: the API
// interface (the calls flexlink makes, in Go types), Lib (libcuda.so.1 loaded
// at run time with purego, no cgo), and the Error type that carries a
// CUresult's name and description.
//
// Contexts: like the C API, every call except Init, DriverVersion, the
// Device* queries, PrimaryCtx* and CtxSetCurrent works on the context that is
// current on the calling OS thread. This package does not manage that; package
// gpu locks the goroutine to its thread and sets the context before each call.
package cu

import (
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/internal/errs"
)

// Handles, as the driver API declares them. Opaque pointers are uintptr;
// device pointers are 64-bit integers (CUdeviceptr).
type (
	Device   int32   // CUdevice: an ordinal-like handle
	Context  uintptr // CUcontext
	Stream   uintptr // CUstream; 0 is the legacy default stream
	Event    uintptr // CUevent
	Module   uintptr // CUmodule
	Function uintptr // CUfunction
	DevPtr   uint64  // CUdeviceptr
)

// IPCHandleSize is the size of CUipcMemHandle and CUipcEventHandle.
const IPCHandleSize = 64

// IPCHandle is CUipcMemHandle / CUipcEventHandle: 64 opaque bytes that another
// process on the same host opens.
type IPCHandle struct{ Reserved [IPCHandleSize]byte }

// Attr is a CUdevice_attribute.
type Attr int32

// Device attributes flexlink reads (values from cuda.h).
const (
	AttrMaxThreadsPerBlock Attr = 1
	AttrMultiprocessors    Attr = 16
	AttrCanMapHostMemory   Attr = 19
	AttrPCIBusID           Attr = 33
	AttrPCIDeviceID        Attr = 34
	AttrUnifiedAddressing  Attr = 41
	AttrPCIDomainID        Attr = 50
	AttrComputeMajor       Attr = 75
	AttrComputeMinor       Attr = 76
	AttrMPSEnabled         Attr = 133 // CUDA 12.4+: contexts on the device are shared through MPS
)

// Flags (values from cuda.h).
const (
	HostAllocPortable     = 0x01 // CU_MEMHOSTALLOC_PORTABLE
	HostAllocDeviceMap    = 0x02 // CU_MEMHOSTALLOC_DEVICEMAP
	HostRegisterPortable  = 0x01 // CU_MEMHOSTREGISTER_PORTABLE
	HostRegisterDeviceMap = 0x02 // CU_MEMHOSTREGISTER_DEVICEMAP
	StreamNonBlocking     = 0x01 // CU_STREAM_NON_BLOCKING
	EventBlockingSync     = 0x01 // CU_EVENT_BLOCKING_SYNC
	EventDisableTiming    = 0x02 // CU_EVENT_DISABLE_TIMING
	EventInterprocess     = 0x04 // CU_EVENT_INTERPROCESS
	IPCLazyEnablePeer     = 0x01 // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
)

// Result is a CUresult.
type Result int32

// Results flexlink acts on (values from cuda.h).
const (
	Success                    Result = 0
	ErrorInvalidValue          Result = 1
	ErrorOutOfMemory           Result = 2
	ErrorNotInitialized        Result = 3
	ErrorInsufficientDriver    Result = 35
	ErrorNoDevice              Result = 100
	ErrorInvalidDevice         Result = 101
	ErrorInvalidImage          Result = 200
	ErrorInvalidContext        Result = 201
	ErrorUnsupportedPTX        Result = 222
	ErrorInvalidHandle         Result = 400
	ErrorNotFound              Result = 500
	ErrorNotReady              Result = 600
	ErrorLaunchOutOfResources  Result = 701
	ErrorPeerAlreadyEnabled    Result = 704
	ErrorHostAlreadyRegistered Result = 712
	ErrorNotSupported          Result = 801
	ErrorSystemDriverMismatch  Result = 803
	ErrorCompatNotSupported    Result = 804
)

// Error is a failed driver call: "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of
// memory". Results that mean "this machine cannot do that" (no device, driver
// too old, not supported) unwrap to errs.ErrNotSupported.
type Error struct {
	Func string // driver entry point, without its version suffix
	Code Result
	Name string // CUDA_ERROR_...
	Desc string // the driver's description
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s: %s", e.Func, e.Name, e.Desc) }

// Unwrap returns errs.ErrNotSupported for results that say the hardware or
// driver lacks something, nil otherwise.
func (e *Error) Unwrap() error {
	switch e.Code {
	case ErrorNoDevice, ErrorInsufficientDriver, ErrorUnsupportedPTX, ErrorNotSupported,
		ErrorSystemDriverMismatch, ErrorCompatNotSupported:
		return errs.ErrNotSupported
	}
	return nil
}

// Is reports whether err is (or wraps) a driver error with result code.
func Is(err error, code Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
