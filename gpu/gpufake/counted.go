package gpufake

import (
	"maps"
	"sync"
	"unsafe"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// Calls counts the driver calls made through a driver of OpenCounted, by
// entry point (the cu.API method's name: "MemcpyAsync", "CtxSetCurrent").
// Tests pin how many driver calls a path makes: on a GPU each is a trip
// into libcuda, most of them under the driver's lock.
type Calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *Calls) note(name string) {
	c.mu.Lock()
	c.n[name]++
	c.mu.Unlock()
}

// Counts is a copy of the counts so far.
func (c *Calls) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// Since is the calls made after before (a Counts), by entry point; entry
// points not called since are absent.
func (c *Calls) Since(before map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range c.Counts() {
		if v > before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// OpenCounted is Open with every driver call counted in the returned
// Calls.
func OpenCounted(cfg Config) (*gpu.Driver, *Calls, error) {
	calls := &Calls{n: map[string]int{}}
	d, err := gpu.NewDriver(&countedAPI{API: newFake(cfg), calls: calls}, "fake")
	return d, calls, err
}

// countedAPI is the fake driver with each call counted (its methods are
// the API's, one each).
type countedAPI struct {
	cu.API
	calls *Calls
}

var _ cu.API = (*countedAPI)(nil)

func (c *countedAPI) DriverVersion() (int, error) {
	c.calls.note("DriverVersion")
	return c.API.DriverVersion()
}

func (c *countedAPI) DeviceCount() (int, error) {
	c.calls.note("DeviceCount")
	return c.API.DeviceCount()
}

func (c *countedAPI) DeviceGet(a0 int) (cu.Device, error) {
	c.calls.note("DeviceGet")
	return c.API.DeviceGet(a0)
}

func (c *countedAPI) DeviceName(a0 cu.Device) (string, error) {
	c.calls.note("DeviceName")
	return c.API.DeviceName(a0)
}

func (c *countedAPI) DeviceAttribute(a0 cu.Attr, a1 cu.Device) (int, error) {
	c.calls.note("DeviceAttribute")
	return c.API.DeviceAttribute(a0, a1)
}

func (c *countedAPI) DevicePCIBusID(a0 cu.Device) (string, error) {
	c.calls.note("DevicePCIBusID")
	return c.API.DevicePCIBusID(a0)
}

func (c *countedAPI) DeviceTotalMem(a0 cu.Device) (uint64, error) {
	c.calls.note("DeviceTotalMem")
	return c.API.DeviceTotalMem(a0)
}

func (c *countedAPI) DeviceCanAccessPeer(a0 cu.Device, a1 cu.Device) (bool, error) {
	c.calls.note("DeviceCanAccessPeer")
	return c.API.DeviceCanAccessPeer(a0, a1)
}

func (c *countedAPI) PrimaryCtxRetain(a0 cu.Device) (cu.Context, error) {
	c.calls.note("PrimaryCtxRetain")
	return c.API.PrimaryCtxRetain(a0)
}

func (c *countedAPI) PrimaryCtxRelease(a0 cu.Device) error {
	c.calls.note("PrimaryCtxRelease")
	return c.API.PrimaryCtxRelease(a0)
}

func (c *countedAPI) CtxSetCurrent(a0 cu.Context) error {
	c.calls.note("CtxSetCurrent")
	return c.API.CtxSetCurrent(a0)
}

func (c *countedAPI) CtxGetCurrent() (cu.Context, error) {
	c.calls.note("CtxGetCurrent")
	return c.API.CtxGetCurrent()
}

func (c *countedAPI) CtxEnablePeerAccess(a0 cu.Context) error {
	c.calls.note("CtxEnablePeerAccess")
	return c.API.CtxEnablePeerAccess(a0)
}

func (c *countedAPI) MemGetInfo() (uint64, uint64, error) {
	c.calls.note("MemGetInfo")
	return c.API.MemGetInfo()
}

func (c *countedAPI) MemAlloc(a0 uint64) (cu.DevPtr, error) {
	c.calls.note("MemAlloc")
	return c.API.MemAlloc(a0)
}

func (c *countedAPI) MemFree(a0 cu.DevPtr) error {
	c.calls.note("MemFree")
	return c.API.MemFree(a0)
}

func (c *countedAPI) MemHostAlloc(a0 uint64, a1 uint32) (unsafe.Pointer, error) {
	c.calls.note("MemHostAlloc")
	return c.API.MemHostAlloc(a0, a1)
}

func (c *countedAPI) MemFreeHost(a0 unsafe.Pointer) error {
	c.calls.note("MemFreeHost")
	return c.API.MemFreeHost(a0)
}

func (c *countedAPI) MemHostRegister(a0 unsafe.Pointer, a1 uint64, a2 uint32) error {
	c.calls.note("MemHostRegister")
	return c.API.MemHostRegister(a0, a1, a2)
}

func (c *countedAPI) MemHostUnregister(a0 unsafe.Pointer) error {
	c.calls.note("MemHostUnregister")
	return c.API.MemHostUnregister(a0)
}

func (c *countedAPI) MemHostGetDevicePointer(a0 unsafe.Pointer) (cu.DevPtr, error) {
	c.calls.note("MemHostGetDevicePointer")
	return c.API.MemHostGetDevicePointer(a0)
}

func (c *countedAPI) MemcpyHtoDAsync(a0 cu.DevPtr, a1 unsafe.Pointer, a2 uint64, a3 cu.Stream) error {
	c.calls.note("MemcpyHtoDAsync")
	return c.API.MemcpyHtoDAsync(a0, a1, a2, a3)
}

func (c *countedAPI) MemcpyDtoHAsync(a0 unsafe.Pointer, a1 cu.DevPtr, a2 uint64, a3 cu.Stream) error {
	c.calls.note("MemcpyDtoHAsync")
	return c.API.MemcpyDtoHAsync(a0, a1, a2, a3)
}

func (c *countedAPI) MemcpyAsync(a0 cu.DevPtr, a1 cu.DevPtr, a2 uint64, a3 cu.Stream) error {
	c.calls.note("MemcpyAsync")
	return c.API.MemcpyAsync(a0, a1, a2, a3)
}

func (c *countedAPI) MemcpyPeerAsync(a0 cu.DevPtr, a1 cu.Context, a2 cu.DevPtr, a3 cu.Context, a4 uint64, a5 cu.Stream) error {
	c.calls.note("MemcpyPeerAsync")
	return c.API.MemcpyPeerAsync(a0, a1, a2, a3, a4, a5)
}

func (c *countedAPI) MemsetD8Async(a0 cu.DevPtr, a1 uint8, a2 uint64, a3 cu.Stream) error {
	c.calls.note("MemsetD8Async")
	return c.API.MemsetD8Async(a0, a1, a2, a3)
}

func (c *countedAPI) StreamCreate(a0 uint32) (cu.Stream, error) {
	c.calls.note("StreamCreate")
	return c.API.StreamCreate(a0)
}

func (c *countedAPI) StreamDestroy(a0 cu.Stream) error {
	c.calls.note("StreamDestroy")
	return c.API.StreamDestroy(a0)
}

func (c *countedAPI) StreamSynchronize(a0 cu.Stream) error {
	c.calls.note("StreamSynchronize")
	return c.API.StreamSynchronize(a0)
}

func (c *countedAPI) StreamQuery(a0 cu.Stream) (bool, error) {
	c.calls.note("StreamQuery")
	return c.API.StreamQuery(a0)
}

func (c *countedAPI) StreamWaitEvent(a0 cu.Stream, a1 cu.Event) error {
	c.calls.note("StreamWaitEvent")
	return c.API.StreamWaitEvent(a0, a1)
}

func (c *countedAPI) EventCreate(a0 uint32) (cu.Event, error) {
	c.calls.note("EventCreate")
	return c.API.EventCreate(a0)
}

func (c *countedAPI) EventDestroy(a0 cu.Event) error {
	c.calls.note("EventDestroy")
	return c.API.EventDestroy(a0)
}

func (c *countedAPI) EventRecord(a0 cu.Event, a1 cu.Stream) error {
	c.calls.note("EventRecord")
	return c.API.EventRecord(a0, a1)
}

func (c *countedAPI) EventSynchronize(a0 cu.Event) error {
	c.calls.note("EventSynchronize")
	return c.API.EventSynchronize(a0)
}

func (c *countedAPI) EventQuery(a0 cu.Event) (bool, error) {
	c.calls.note("EventQuery")
	return c.API.EventQuery(a0)
}

func (c *countedAPI) EventElapsedTime(a0 cu.Event, a1 cu.Event) (float32, error) {
	c.calls.note("EventElapsedTime")
	return c.API.EventElapsedTime(a0, a1)
}

func (c *countedAPI) IpcGetMemHandle(a0 cu.DevPtr) (cu.IPCHandle, error) {
	c.calls.note("IpcGetMemHandle")
	return c.API.IpcGetMemHandle(a0)
}

func (c *countedAPI) IpcOpenMemHandle(a0 cu.IPCHandle, a1 uint32) (cu.DevPtr, error) {
	c.calls.note("IpcOpenMemHandle")
	return c.API.IpcOpenMemHandle(a0, a1)
}

func (c *countedAPI) IpcCloseMemHandle(a0 cu.DevPtr) error {
	c.calls.note("IpcCloseMemHandle")
	return c.API.IpcCloseMemHandle(a0)
}

func (c *countedAPI) IpcGetEventHandle(a0 cu.Event) (cu.IPCHandle, error) {
	c.calls.note("IpcGetEventHandle")
	return c.API.IpcGetEventHandle(a0)
}

func (c *countedAPI) IpcOpenEventHandle(a0 cu.IPCHandle) (cu.Event, error) {
	c.calls.note("IpcOpenEventHandle")
	return c.API.IpcOpenEventHandle(a0)
}

func (c *countedAPI) ModuleLoadData(a0 []byte) (cu.Module, error) {
	c.calls.note("ModuleLoadData")
	return c.API.ModuleLoadData(a0)
}

func (c *countedAPI) ModuleUnload(a0 cu.Module) error {
	c.calls.note("ModuleUnload")
	return c.API.ModuleUnload(a0)
}

func (c *countedAPI) ModuleGetFunction(a0 cu.Module, a1 string) (cu.Function, error) {
	c.calls.note("ModuleGetFunction")
	return c.API.ModuleGetFunction(a0, a1)
}

func (c *countedAPI) FuncLoad(a0 cu.Function) error {
	c.calls.note("FuncLoad")
	return c.API.FuncLoad(a0)
}

func (c *countedAPI) LaunchKernel(a0 cu.Function, a1 [3]uint32, a2 [3]uint32, a3 uint32, a4 cu.Stream, a5 []unsafe.Pointer) error {
	c.calls.note("LaunchKernel")
	return c.API.LaunchKernel(a0, a1, a2, a3, a4, a5)
}

func (c *countedAPI) StreamCaptureInfo(a0 cu.Stream) (cu.CaptureStatus, uint64, cu.Graph, error) {
	c.calls.note("StreamCaptureInfo")
	return c.API.StreamCaptureInfo(a0)
}

func (c *countedAPI) ThreadExchangeStreamCaptureMode(a0 cu.CaptureMode) (cu.CaptureMode, error) {
	c.calls.note("ThreadExchangeStreamCaptureMode")
	return c.API.ThreadExchangeStreamCaptureMode(a0)
}

func (c *countedAPI) EventRecordBranch(a0 cu.Stream, a1 cu.Event, a2 cu.GraphNode) (cu.GraphNode, error) {
	c.calls.note("EventRecordBranch")
	return c.API.EventRecordBranch(a0, a1, a2)
}

func (c *countedAPI) EventRecordWithFlags(a0 cu.Event, a1 cu.Stream, a2 uint32) error {
	c.calls.note("EventRecordWithFlags")
	return c.API.EventRecordWithFlags(a0, a1, a2)
}

func (c *countedAPI) StreamWaitEventFlags(a0 cu.Stream, a1 cu.Event, a2 uint32) error {
	c.calls.note("StreamWaitEventFlags")
	return c.API.StreamWaitEventFlags(a0, a1, a2)
}

func (c *countedAPI) LaunchHostFunc(a0 cu.Stream, a1 func()) error {
	c.calls.note("LaunchHostFunc")
	return c.API.LaunchHostFunc(a0, a1)
}

func (c *countedAPI) UserObjectCreate(a0 func()) (cu.UserObject, error) {
	c.calls.note("UserObjectCreate")
	return c.API.UserObjectCreate(a0)
}

func (c *countedAPI) UserObjectRelease(a0 cu.UserObject, a1 uint32) error {
	c.calls.note("UserObjectRelease")
	return c.API.UserObjectRelease(a0, a1)
}

func (c *countedAPI) GraphRetainUserObject(a0 cu.Graph, a1 cu.UserObject, a2 uint32, a3 bool) error {
	c.calls.note("GraphRetainUserObject")
	return c.API.GraphRetainUserObject(a0, a1, a2, a3)
}

func (c *countedAPI) StreamBeginCapture(a0 cu.Stream, a1 cu.CaptureMode) error {
	c.calls.note("StreamBeginCapture")
	return c.API.StreamBeginCapture(a0, a1)
}

func (c *countedAPI) StreamEndCapture(a0 cu.Stream) (cu.Graph, error) {
	c.calls.note("StreamEndCapture")
	return c.API.StreamEndCapture(a0)
}

func (c *countedAPI) GraphInstantiate(a0 cu.Graph) (cu.GraphExec, error) {
	c.calls.note("GraphInstantiate")
	return c.API.GraphInstantiate(a0)
}

func (c *countedAPI) GraphLaunch(a0 cu.GraphExec, a1 cu.Stream) error {
	c.calls.note("GraphLaunch")
	return c.API.GraphLaunch(a0, a1)
}

func (c *countedAPI) GraphDestroy(a0 cu.Graph) error {
	c.calls.note("GraphDestroy")
	return c.API.GraphDestroy(a0)
}

func (c *countedAPI) GraphExecDestroy(a0 cu.GraphExec) error {
	c.calls.note("GraphExecDestroy")
	return c.API.GraphExecDestroy(a0)
}

func (c *countedAPI) StreamWriteValue32(a0 cu.Stream, a1 cu.DevPtr, a2 uint32, a3 uint32) error {
	c.calls.note("StreamWriteValue32")
	return c.API.StreamWriteValue32(a0, a1, a2, a3)
}

func (c *countedAPI) StreamWaitValue32(a0 cu.Stream, a1 cu.DevPtr, a2 uint32, a3 uint32) error {
	c.calls.note("StreamWaitValue32")
	return c.API.StreamWaitValue32(a0, a1, a2, a3)
}
