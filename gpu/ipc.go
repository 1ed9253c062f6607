package gpu

import (
	"fmt"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// CUDA IPC: a process exports a device allocation or an event as 64 opaque
// bytes, ships them over the bootstrap, and another process on the same host
// opens them. The driver does not allow opening a handle in the process that
// made it.

// IPCHandleSize is the length of the handles IPCHandle returns.
const IPCHandleSize = cu.IPCHandleSize

// IPCHandle exports b, which must be a whole allocation from Alloc, for
// another process to open with OpenIPCBuffer. The handle stays valid while
// the allocation lives.
func (b *Buffer) IPCHandle() ([]byte, error) {
	if !b.whole() || b.own.ipc {
		return nil, fmt.Errorf("%s: IPC handle of %#x: only a whole allocation made by Alloc can be exported", b.dev, b.ptr)
	}
	var h cu.IPCHandle
	err := b.dev.do(func(api cu.API) (e error) { h, e = api.IpcGetMemHandle(b.ptr); return })
	if err != nil {
		return nil, fmt.Errorf("%s: IPC handle of %#x: %w", b.dev, b.ptr, err)
	}
	return append([]byte(nil), h.Reserved[:]...), nil
}

func toHandle(what string, h []byte) (cu.IPCHandle, error) {
	var ch cu.IPCHandle
	if len(h) != IPCHandleSize {
		return ch, fmt.Errorf("gpu: open %s: handle has %d bytes, want %d", what, len(h), IPCHandleSize)
	}
	copy(ch.Reserved[:], h)
	return ch, nil
}

// openIPCBuffer is Device.OpenIPCBuffer.
func openIPCBuffer(dv *Device, handle []byte, n int) (*Buffer, error) {
	h, err := toHandle("IPC buffer", handle)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("%s: open IPC buffer: length %d must be positive", dv, n)
	}
	var p cu.DevPtr
	err = dv.do(func(api cu.API) (e error) { p, e = api.IpcOpenMemHandle(h, cu.IPCLazyEnablePeer); return })
	if err != nil {
		return nil, fmt.Errorf("%s: open IPC buffer: %w", dv, err)
	}
	return &Buffer{dev: dv, ptr: p, n: n, own: &allocation{base: p, n: n, ipc: true}}, nil
}

// newIPCEvent is Device.NewIPCEvent.
func newIPCEvent(dv *Device) (*Event, error) {
	return newEvent(dv, cu.EventInterprocess|cu.EventDisableTiming, false)
}

// IPCHandle exports an event made by NewIPCEvent.
func (e *Event) IPCHandle() ([]byte, error) {
	var h cu.IPCHandle
	err := e.dev.do(func(api cu.API) (err error) { h, err = api.IpcGetEventHandle(e.h); return })
	if err != nil {
		return nil, fmt.Errorf("%s: IPC handle of event: %w", e.dev, err)
	}
	return append([]byte(nil), h.Reserved[:]...), nil
}

// openIPCEvent is Device.OpenIPCEvent.
func openIPCEvent(dv *Device, handle []byte) (*Event, error) {
	h, err := toHandle("IPC event", handle)
	if err != nil {
		return nil, err
	}
	var ev cu.Event
	err = dv.do(func(api cu.API) (e error) { ev, e = api.IpcOpenEventHandle(h); return })
	if err != nil {
		return nil, fmt.Errorf("%s: open IPC event: %w", dv, err)
	}
	return &Event{dev: dv, h: ev}, nil
}
