package cufake

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

var _ cu.API = (*Fake)(nil)

// Device addresses: device d's allocations and mappings lie in
// [devBase + d<<40, devBase + (d+1)<<40), each on a 256 MiB boundary (so
// 256-byte aligned like cuMemAlloc's) and never reused. Ranges never
// overlap: an address resolves to one allocation only. They start above
// every x86-64 user-space address (below 1<<47), so no host range that
// MemHostGetDevicePointer maps (device address = host address) lies in them.
const (
	devBase   = 0x8000_0000_0000
	devSpan   = 1 << 40
	allocStep = 1 << 28
)

// place reserves n bytes of device dev's address space.
func (f *Fake) place(fn string, dev int, n uint64) (cu.DevPtr, error) {
	at := f.mem.cursor[dev]
	step := (max(n, 1) + allocStep - 1) / allocStep * allocStep
	if at+step > devSpan {
		return 0, fail(fn, cu.ErrorOutOfMemory, "fake address space of device %d used up", dev)
	}
	f.mem.cursor[dev] = at + step
	return cu.DevPtr(devBase + uint64(dev)*devSpan + at), nil
}

func (f *Fake) DriverVersion() (int, error) { return 13000, nil }
func (f *Fake) DeviceCount() (int, error)   { return f.cfg.Devices, nil }

func (f *Fake) device(fn string, d cu.Device) error {
	if d < 0 || int(d) >= f.cfg.Devices {
		return fail(fn, cu.ErrorInvalidDevice, "device %d of %d", d, f.cfg.Devices)
	}
	return nil
}

func (f *Fake) DeviceGet(ordinal int) (cu.Device, error) {
	return cu.Device(ordinal), f.device("cuDeviceGet", cu.Device(ordinal))
}

func (f *Fake) DeviceName(d cu.Device) (string, error) {
	return f.cfg.Name, f.device("cuDeviceGetName", d)
}

func (f *Fake) DeviceAttribute(a cu.Attr, d cu.Device) (int, error) {
	if err := f.device("cuDeviceGetAttribute", d); err != nil {
		return 0, err
	}
	switch a {
	case cu.AttrMaxThreadsPerBlock:
		return 1024, nil
	case cu.AttrMultiprocessors:
		return f.cfg.SMs, nil
	case cu.AttrCanMapHostMemory, cu.AttrUnifiedAddressing:
		return 1, nil
	case cu.AttrPCIBusID:
		return 0x10 + int(d), nil
	case cu.AttrComputeMajor:
		return f.cfg.ComputeMajor, nil
	case cu.AttrComputeMinor:
		return f.cfg.ComputeMinor, nil
	case cu.AttrMPSEnabled:
		if f.cfg.MPS {
			return 1, nil
		}
	}
	return 0, nil
}

func (f *Fake) DevicePCIBusID(d cu.Device) (string, error) {
	return fmt.Sprintf("0000:%02x:00.0", 0x10+int(d)), f.device("cuDeviceGetPCIBusId", d)
}

func (f *Fake) DeviceTotalMem(d cu.Device) (uint64, error) {
	return f.cfg.MemPerDevice, f.device("cuDeviceTotalMem", d)
}

func (f *Fake) DeviceCanAccessPeer(d, peer cu.Device) (bool, error) {
	if err := f.device("cuDeviceCanAccessPeer", d); err != nil {
		return false, err
	}
	return !f.cfg.NoPeer && d != peer, f.device("cuDeviceCanAccessPeer", peer)
}

// Contexts are device ordinal + 1.

func (f *Fake) PrimaryCtxRetain(d cu.Device) (cu.Context, error) {
	if err := f.device("cuDevicePrimaryCtxRetain", d); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctx.retains[d]++
	return cu.Context(d + 1), nil
}

func (f *Fake) PrimaryCtxRelease(d cu.Device) error {
	if err := f.device("cuDevicePrimaryCtxRelease", d); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.retains[d] == 0 {
		return fail("cuDevicePrimaryCtxRelease", cu.ErrorInvalidContext, "device %d not retained", d)
	}
	f.ctx.retains[d]--
	return nil
}

func (f *Fake) CtxSetCurrent(c cu.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c != 0 && f.ctx.retains[int(c)-1] == 0 {
		return fail("cuCtxSetCurrent", cu.ErrorInvalidContext, "context %d is not retained", c)
	}
	f.ctx.current[syscall.Gettid()] = c
	return nil
}

func (f *Fake) CtxGetCurrent() (cu.Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctx.current[syscall.Gettid()], nil
}

func (f *Fake) CtxEnablePeerAccess(peer cu.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuCtxEnablePeerAccess")
	if err != nil {
		return err
	}
	p := int(peer) - 1
	if f.cfg.NoPeer || p == dev || p < 0 || p >= f.cfg.Devices {
		return fail("cuCtxEnablePeerAccess", cu.ErrorInvalidDevice, "device %d cannot reach device %d", dev, p)
	}
	if f.ctx.peers[[2]int{dev, p}] {
		return fail("cuCtxEnablePeerAccess", cu.ErrorPeerAlreadyEnabled, "device %d to %d", dev, p)
	}
	f.ctx.peers[[2]int{dev, p}] = true
	return nil
}

func (f *Fake) MemGetInfo() (free, total uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuMemGetInfo")
	if err != nil {
		return 0, 0, err
	}
	return f.cfg.MemPerDevice - f.mem.used[dev], f.cfg.MemPerDevice, nil
}

func (f *Fake) MemAlloc(n uint64) (cu.DevPtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuMemAlloc")
	if err != nil {
		return 0, err
	}
	if err := f.unsafeCall("cuMemAlloc"); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fail("cuMemAlloc", cu.ErrorInvalidValue, "zero bytes")
	}
	if f.mem.used[dev]+n > f.cfg.MemPerDevice {
		return 0, fail("cuMemAlloc", cu.ErrorOutOfMemory, "%d bytes asked, %d free on device %d", n, f.cfg.MemPerDevice-f.mem.used[dev], dev)
	}
	var p cu.DevPtr
	step := (n + allocStep - 1) / allocStep * allocStep
	if k := (freedKey{dev, step}); f.cfg.ReuseFreed && len(f.mem.freed[k]) > 0 {
		p = f.mem.freed[k][len(f.mem.freed[k])-1]
		f.mem.freed[k] = f.mem.freed[k][:len(f.mem.freed[k])-1]
	} else if p, err = f.place("cuMemAlloc", dev, n); err != nil {
		return 0, err
	}
	f.mem.used[dev] += n
	f.mem.allocs[p] = &alloc{dev: dev, data: make([]byte, n), id: f.handle()}
	return p, nil
}

func (f *Fake) MemFree(p cu.DevPtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuMemFree"); err != nil {
		return err
	}
	if err := f.unsafeCall("cuMemFree"); err != nil {
		return err
	}
	a, ok := f.mem.allocs[p]
	if !ok || f.mem.opened[p] {
		return fail("cuMemFree", cu.ErrorInvalidValue, "%#x is not an allocation base", uint64(p))
	}
	f.mem.used[a.dev] -= uint64(len(a.data))
	delete(f.mem.allocs, p)
	if f.cfg.ReuseFreed {
		k := freedKey{a.dev, (uint64(len(a.data)) + allocStep - 1) / allocStep * allocStep}
		if f.mem.freed == nil {
			f.mem.freed = map[freedKey][]cu.DevPtr{}
		}
		f.mem.freed[k] = append(f.mem.freed[k], p)
	}
	return nil
}

func (f *Fake) MemHostAlloc(n uint64, flags uint32) (unsafe.Pointer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuMemHostAlloc"); err != nil {
		return nil, err
	}
	if err := f.unsafeCall("cuMemHostAlloc"); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fail("cuMemHostAlloc", cu.ErrorInvalidValue, "zero bytes")
	}
	b := make([]byte, n)
	p := unsafe.Pointer(&b[0])
	f.mem.host[uintptr(p)] = &hostRange{data: b, n: n}
	return p, nil
}

func (f *Fake) MemFreeHost(p unsafe.Pointer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuMemFreeHost"); err != nil {
		return err
	}
	if r, ok := f.mem.host[uintptr(p)]; !ok || r.registered {
		return fail("cuMemFreeHost", cu.ErrorInvalidValue, "%p is not from cuMemHostAlloc", p)
	}
	delete(f.mem.host, uintptr(p))
	return nil
}

func (f *Fake) MemHostRegister(p unsafe.Pointer, n uint64, flags uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuMemHostRegister"); err != nil {
		return err
	}
	if n == 0 {
		return fail("cuMemHostRegister", cu.ErrorInvalidValue, "zero bytes")
	}
	for start, r := range f.mem.host {
		if uintptr(p) < start+uintptr(r.n) && start < uintptr(p)+uintptr(n) {
			return fail("cuMemHostRegister", cu.ErrorHostAlreadyRegistered, "%p+%d overlaps %#x+%d", p, n, start, r.n)
		}
	}
	// The device address of registered memory is its host address (UVA),
	// so kernels reach it through resolve.
	f.mem.host[uintptr(p)] = &hostRange{data: unsafe.Slice((*byte)(p), n), n: n, registered: true}
	return nil
}

func (f *Fake) MemHostUnregister(p unsafe.Pointer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuMemHostUnregister"); err != nil {
		return err
	}
	if r, ok := f.mem.host[uintptr(p)]; !ok || !r.registered {
		return fail("cuMemHostUnregister", cu.ErrorInvalidValue, "%p is not registered", p)
	}
	delete(f.mem.host, uintptr(p))
	return nil
}

// MemHostGetDevicePointer gives memory from MemHostAlloc the device address
// equal to its host address, as unified addressing does; kernels reach it
// through Mem.
func (f *Fake) MemHostGetDevicePointer(p unsafe.Pointer) (cu.DevPtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.mem.host[uintptr(p)]; !ok || r.data == nil {
		return 0, fail("cuMemHostGetDevicePointer", cu.ErrorInvalidValue, "%p is not the start of memory from cuMemHostAlloc or cuMemHostRegister", p)
	}
	return cu.DevPtr(uintptr(p)), nil
}

func (f *Fake) MemcpyHtoDAsync(dst cu.DevPtr, src unsafe.Pointer, n uint64, s cu.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.streamDev("cuMemcpyHtoDAsync", s); err != nil {
		return err
	}
	d, _, err := f.resolve("cuMemcpyHtoDAsync", dst, n)
	if err != nil {
		return err
	}
	run := func() error { copyWords(d, unsafe.Slice((*byte)(src), n)); f.Poke(); return nil }
	if f.cfg.CopyStuck != nil && f.cfg.CopyStuck(uintptr(dst), n) {
		run = func() error { return nil }
	}
	if captured, err := f.record("cuMemcpyHtoDAsync", s, run); captured || err != nil {
		return err
	}
	return run()
}

// copyWords copies like copy, but an aligned 8-byte copy is one atomic
// word, as the hardware writes it: kernels (goroutines here) poll such
// words (flag counters, abort words) while the host writes or reads them.
func copyWords(dst, src []byte) {
	if len(dst) == 8 && len(src) == 8 && uintptr(unsafe.Pointer(&dst[0]))%8 == 0 && uintptr(unsafe.Pointer(&src[0]))%8 == 0 {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&dst[0])), atomic.LoadUint64((*uint64)(unsafe.Pointer(&src[0]))))
		return
	}
	copy(dst, src)
}

func (f *Fake) MemcpyDtoHAsync(dst unsafe.Pointer, src cu.DevPtr, n uint64, s cu.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.streamDev("cuMemcpyDtoHAsync", s); err != nil {
		return err
	}
	b, _, err := f.resolve("cuMemcpyDtoHAsync", src, n)
	if err != nil {
		return err
	}
	run := func() error { copyWords(unsafe.Slice((*byte)(dst), n), b); return nil }
	if captured, err := f.record("cuMemcpyDtoHAsync", s, run); captured || err != nil {
		return err
	}
	return run()
}

func (f *Fake) MemcpyAsync(dst, src cu.DevPtr, n uint64, s cu.Stream) error {
	return f.dtod("cuMemcpyAsync", dst, src, n, s, true)
}

func (f *Fake) MemcpyPeerAsync(dst cu.DevPtr, dstCtx cu.Context, src cu.DevPtr, srcCtx cu.Context, n uint64, s cu.Stream) error {
	return f.dtod("cuMemcpyPeerAsync", dst, src, n, s, false)
}

// dtod copies device to device. Like the copy engines, a cuMemcpyAsync
// between devices needs peer access; cuMemcpyPeerAsync does not.
func (f *Fake) dtod(fn string, dst, src cu.DevPtr, n uint64, s cu.Stream, needPeer bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.streamDev(fn, s)
	if err != nil {
		return err
	}
	d, dd, err := f.resolve(fn, dst, n)
	if err != nil {
		return err
	}
	b, sd, err := f.resolve(fn, src, n)
	if err != nil {
		return err
	}
	if needPeer {
		if err := f.reach(fn, dev, dd); err != nil {
			return err
		}
		if err := f.reach(fn, dev, sd); err != nil {
			return err
		}
	}
	if f.capturing(s) == nil { // (no closure: an eager copy allocates nothing)
		copy(d, b)
		f.Poke()
		return nil
	}
	_, err = f.record(fn, s, func() error { copy(d, b); f.Poke(); return nil })
	return err
}

func (f *Fake) MemsetD8Async(dst cu.DevPtr, v uint8, n uint64, s cu.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.streamDev("cuMemsetD8Async", s)
	if err != nil {
		return err
	}
	d, owner, err := f.resolve("cuMemsetD8Async", dst, n)
	if err != nil {
		return err
	}
	if err := f.reach("cuMemsetD8Async", dev, owner); err != nil {
		return err
	}
	run := func() error {
		for i := range d {
			d[i] = v
		}
		f.Poke()
		return nil
	}
	if captured, err := f.record("cuMemsetD8Async", s, run); captured || err != nil {
		return err
	}
	return run()
}

// ipcHandle makes a 64-byte handle from a kind tag and a number.
func ipcHandle(kind byte, v uint64) cu.IPCHandle {
	var h cu.IPCHandle
	copy(h.Reserved[:], "flexlink-fake")
	h.Reserved[15] = kind
	binary.LittleEndian.PutUint64(h.Reserved[16:], v)
	return h
}

func (f *Fake) IpcGetMemHandle(p cu.DevPtr) (cu.IPCHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuIpcGetMemHandle"); err != nil {
		return cu.IPCHandle{}, err
	}
	a, ok := f.mem.allocs[p]
	if !ok || f.mem.opened[p] {
		return cu.IPCHandle{}, fail("cuIpcGetMemHandle", cu.ErrorInvalidValue, "%#x is not an allocation base", uint64(p))
	}
	if f.cfg.IPCRefused != nil && f.cfg.IPCRefused(uintptr(p)) {
		return cu.IPCHandle{}, fail("cuIpcGetMemHandle", cu.ErrorInvalidValue, "%#x cannot be exported (not legacy-IPC-capable memory)", uint64(p))
	}
	h := ipcHandle('m', uint64(p))
	binary.LittleEndian.PutUint64(h.Reserved[24:], a.id) // a new allocation at the same address has another handle
	f.mem.ipc[h] = p
	return h, nil
}

func (f *Fake) IpcOpenMemHandle(h cu.IPCHandle, flags uint32) (cu.DevPtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuIpcOpenMemHandle")
	if err != nil {
		return 0, err
	}
	p, ok := f.mem.ipc[h]
	a := f.mem.allocs[p]
	if !ok || a == nil {
		return 0, fail("cuIpcOpenMemHandle", cu.ErrorInvalidHandle, "unknown or freed handle")
	}
	if f.cfg.NoPeer && a.dev != dev { // as the driver: another GPU's memory needs peer access
		return 0, fail("cuIpcOpenMemHandle", cu.ErrorInvalidDevice, "device %d cannot reach device %d", dev, a.dev)
	}
	q, err := f.place("cuIpcOpenMemHandle", dev, uint64(len(a.data)))
	if err != nil {
		return 0, err
	}
	f.mem.allocs[q] = &alloc{dev: dev, data: a.data} // the mapping is reachable from the opener (lazy peer access)
	f.mem.opened[q] = true
	return q, nil
}

func (f *Fake) IpcCloseMemHandle(p cu.DevPtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuIpcCloseMemHandle"); err != nil {
		return err
	}
	if !f.mem.opened[p] {
		return fail("cuIpcCloseMemHandle", cu.ErrorInvalidValue, "%#x was not opened from a handle", uint64(p))
	}
	delete(f.mem.opened, p)
	delete(f.mem.allocs, p)
	return nil
}
