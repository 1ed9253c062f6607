package gpu

// The resources a Device makes: each constructor below hands the work to
// its resource's file (stream.go, memory.go, ipc.go, sharedhost.go,
// module.go, foreign.go), where the type it returns owns its state.

// WrapAllocation returns a Buffer for the allocation of n bytes at device
// address base on dv, made elsewhere (cudaMalloc; cuMemGetAddressRange
// gives base and n for any pointer inside it). Cut the caller's ranges from
// it with Sub; keep one Buffer per allocation, since the direct plane caches
// peers' mappings per allocation object (SameAllocation). Its Free fails
// with errs.ErrClosed: the memory belongs to whoever allocated it, and must
// outlive every collective that uses it.
func (dv *Device) WrapAllocation(base uintptr, n int) (*Buffer, error) {
	return wrapAllocation(dv, base, n)
}

// WrapStream returns a Stream for the CUstream (cudaStream_t) h that was
// created on dv elsewhere; 0 is the legacy default stream, and the
// per-thread default stream's handle works too. Its Close fails with
// errs.ErrClosed: the stream belongs to its creator.
func (dv *Device) WrapStream(h uintptr) *Stream {
	return wrapStream(dv, h)
}

// OpenIPCBuffer maps another process's allocation, exported with
// Buffer.IPCHandle, into this device's context; n is the allocation's length
// (the handle does not carry it). Peer access to the owning GPU is enabled
// as needed. Free unmaps it; the owner frees the memory.
func (dv *Device) OpenIPCBuffer(handle []byte, n int) (*Buffer, error) {
	return openIPCBuffer(dv, handle, n)
}

// NewIPCEvent creates an event that other processes can wait for (through
// IPCHandle and OpenIPCEvent). Such events cannot time.
func (dv *Device) NewIPCEvent() (*Event, error) {
	return newIPCEvent(dv)
}

// OpenIPCEvent opens another process's event. The result can be waited for
// (Synchronize, Done, Stream.Wait) and recorded on this device's streams.
func (dv *Device) OpenIPCEvent(handle []byte) (*Event, error) {
	return openIPCEvent(dv, handle)
}

// Alloc returns n bytes (n > 0) of device memory, 256-byte aligned,
// uninitialised.
func (dv *Device) Alloc(n int) (*Buffer, error) {
	return allocBuffer(dv, n)
}

// AllocHost returns n bytes (n > 0) of pinned host memory (cuMemHostAlloc).
func (dv *Device) AllocHost(n int) (*HostMem, error) {
	return allocHost(dv, n)
}

// RegisterHost page-locks the existing memory b (cuMemHostRegister) so the
// devices copy it at full speed; b is typically a shared mapping (mmap of a
// memfd or /dev/shm file) that another process registers too. b may also be
// Go memory, which then stays referenced until Free. Bytes returns b.
func (dv *Device) RegisterHost(b []byte) (*HostMem, error) {
	return registerHost(dv, b)
}

// LoadModule loads a PTX or cubin image into the device's context.
func (dv *Device) LoadModule(image []byte) (*Module, error) {
	return loadModule(dv, image)
}

// NewSharedHost creates n bytes (n > 0, rounded up to whole pages) of
// zeroed shared memory, maps and registers it. Pages are not touched here;
// the driver pins them when it registers the range.
func (dv *Device) NewSharedHost(n int) (h *SharedHost, err error) {
	return newSharedHost(dv, n)
}

// OpenSharedHost maps and registers the memory another process (or this
// one) made with NewSharedHost, while that process still holds its
// descriptor. It fails when the descriptor is gone, names another file, or
// has another length.
func (dv *Device) OpenSharedHost(ref SharedHostRef) (*SharedHost, error) {
	return openSharedHost(dv, ref)
}

// NewStream creates a stream on the device.
func (dv *Device) NewStream() (*Stream, error) {
	return newStream(dv)
}

// NewEvent creates an event. timing events can measure elapsed time (Since)
// and cost a little more to record.
func (dv *Device) NewEvent(timing bool) (*Event, error) {
	return newTimingEvent(dv, timing)
}
