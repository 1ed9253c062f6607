package cu

// CUDA graphs and stream capture: the types and values of cuda.h that the
// capture calls of API take.

type (
	Graph      uintptr // CUgraph
	GraphExec  uintptr // CUgraphExec
	UserObject uintptr // CUuserObject
	GraphNode  uintptr // CUgraphNode
)

// CaptureStatus is a CUstreamCaptureStatus.
type CaptureStatus int32

const (
	CaptureNone        CaptureStatus = 0 // CU_STREAM_CAPTURE_STATUS_NONE
	CaptureActive      CaptureStatus = 1 // CU_STREAM_CAPTURE_STATUS_ACTIVE
	CaptureInvalidated CaptureStatus = 2 // CU_STREAM_CAPTURE_STATUS_INVALIDATED
)

func (s CaptureStatus) String() string {
	switch s {
	case CaptureNone:
		return "none"
	case CaptureActive:
		return "active"
	case CaptureInvalidated:
		return "invalidated"
	}
	return "unknown"
}

// CaptureMode is a CUstreamCaptureMode: which threads a capture forbids
// potentially unsafe calls (cuMemAlloc, synchronisations, queries).
type CaptureMode int32

const (
	CaptureModeGlobal      CaptureMode = 0 // CU_STREAM_CAPTURE_MODE_GLOBAL
	CaptureModeThreadLocal CaptureMode = 1 // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	CaptureModeRelaxed     CaptureMode = 2 // CU_STREAM_CAPTURE_MODE_RELAXED
)

func (m CaptureMode) String() string {
	switch m {
	case CaptureModeGlobal:
		return "global"
	case CaptureModeThreadLocal:
		return "thread-local"
	case CaptureModeRelaxed:
		return "relaxed"
	}
	return "unknown"
}

// Flags of the capture calls (values from cuda.h).
const (
	EventRecordExternal   = 0x1 // CU_EVENT_RECORD_EXTERNAL: in a capture, an event record node
	EventWaitExternal     = 0x1 // CU_EVENT_WAIT_EXTERNAL: in a capture, an event wait node
	UserObjectNoDestrSync = 0x1 // CU_USER_OBJECT_NO_DESTRUCTOR_SYNC (required)
	GraphUserObjectMove   = 0x1 // CU_GRAPH_USER_OBJECT_MOVE: the caller's references pass to the graph
)

// Conditions of cuStreamWaitValue32 (CUstreamWaitValue_flags).
const (
	WaitValueGEQ = 0x0 // (int32)(*addr - value) >= 0
	WaitValueEQ  = 0x1 // *addr == value
	WaitValueAND = 0x2 // (*addr & value) != 0
	WaitValueNOR = 0x3 // ~(*addr | value) != 0
)

// Results of the capture calls (values from cuda.h).
const (
	ErrorIllegalState           Result = 401
	ErrorLaunchTimeout          Result = 702 // CUDA_ERROR_LAUNCH_TIMEOUT
	ErrorCaptureUnsupported     Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ErrorCaptureInvalidated     Result = 901 // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	ErrorCaptureMerge           Result = 902
	ErrorCaptureUnmatched       Result = 903
	ErrorCaptureUnjoined        Result = 904
	ErrorCaptureIsolation       Result = 905 // CUDA_ERROR_STREAM_CAPTURE_ISOLATION
	ErrorCaptureImplicit        Result = 906
	ErrorCapturedEvent          Result = 907 // CUDA_ERROR_CAPTURED_EVENT
	ErrorCaptureWrongThread     Result = 908
	ErrorGraphExecUpdateFailure Result = 910
)
