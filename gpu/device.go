package gpu

import (
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// Device is one GPU and its primary context. Get it from Driver.Device.
type Device struct {
	drv     *Driver
	ord     int
	h       cu.Device
	ctx     cu.Context
	info    deviceInfo
	access  peerAccess
	kernels kernelCache
}

// deviceInfo is what the driver says about the GPU, read once.
type deviceInfo struct {
	name, bus         string
	major, minor, sms int
	mps               bool // CU_DEVICE_ATTRIBUTE_MPS_ENABLED
}

// peerAccess is the set of ordinals whose memory this device's context
// may access.
type peerAccess struct {
	mu    sync.Mutex
	peers map[int]bool
}

// kernelCache holds the kernels, loaded family by family on first use
// (kernelset.go).
type kernelCache struct {
	mu  sync.Mutex // held while loading a family (milliseconds; seconds when the driver compiles PTX)
	set *kernelSet
}

func openDevice(d *Driver, i int) (*Device, error) {
	api := d.api
	h, err := api.DeviceGet(i)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: %w", i, err)
	}
	dv := &Device{drv: d, ord: i, h: h, access: peerAccess{peers: map[int]bool{}}}
	if dv.info.name, err = api.DeviceName(h); err != nil {
		return nil, fmt.Errorf("gpu %d: %w", i, err)
	}
	if dv.info.bus, err = api.DevicePCIBusID(h); err != nil {
		return nil, fmt.Errorf("gpu %d: %w", i, err)
	}
	for _, a := range []struct {
		attr cu.Attr
		v    *int
	}{{cu.AttrComputeMajor, &dv.info.major}, {cu.AttrComputeMinor, &dv.info.minor}, {cu.AttrMultiprocessors, &dv.info.sms}} {
		if *a.v, err = api.DeviceAttribute(a.attr, h); err != nil {
			return nil, fmt.Errorf("gpu %d: %w", i, err)
		}
	}
	// Drivers before CUDA 12.4 do not know the attribute: no MPS known.
	if v, err := api.DeviceAttribute(cu.AttrMPSEnabled, h); err == nil {
		dv.info.mps = v == 1
	}
	if dv.ctx, err = api.PrimaryCtxRetain(h); err != nil {
		return nil, fmt.Errorf("gpu %d: %w", i, err)
	}
	return dv, nil
}

// release unloads what the device loaded and drops the primary context.
func (dv *Device) release() error {
	dv.kernels.mu.Lock()
	k := dv.kernels.set
	dv.kernels.set = nil
	dv.kernels.mu.Unlock()
	var first error
	if k != nil {
		first = k.close()
	}
	if err := dv.drv.api.PrimaryCtxRelease(dv.h); err != nil && first == nil {
		first = fmt.Errorf("%s: %w", dv, err)
	}
	return first
}

// do runs f with this device's primary context current on the calling OS
// thread, the goroutine locked to that thread for the duration, and the
// thread in relaxed capture mode (capture.go): a CUDA graph capture in
// progress elsewhere in the process is never invalidated by the library's
// own calls. Every context-bound driver call in this package goes through
// it or, for work enqueued on a stream, doAsync.
func (dv *Device) do(f func(api cu.API) error) error {
	return dv.doAsync(func(api cu.API) error { return relaxed(api, f) })
}

// Ordinal is the device's index in the driver (0-based).
func (dv *Device) Ordinal() int { return dv.ord }

// Name is the product name, e.g. "NVIDIA H200".
func (dv *Device) Name() string { return dv.info.name }

// PCIBusID is the device's PCI address, "0000:19:00.0".
func (dv *Device) PCIBusID() string { return dv.info.bus }

// ComputeCapability returns the major and minor compute capability (9, 0 for
// Hopper).
func (dv *Device) ComputeCapability() (major, minor int) { return dv.info.major, dv.info.minor }

// MPS reports whether the driver says contexts on this device are shared
// through a CUDA MPS server (CU_DEVICE_ATTRIBUTE_MPS_ENABLED; false on
// drivers before CUDA 12.4). Under MPS the kernels of several processes on
// one GPU run at once, where without it the GPU time-slices between their
// contexts (a wait inside the GPU for another process costs a time slice,
// about 2 ms).
func (dv *Device) MPS() bool { return dv.info.mps }

// Multiprocessors is the number of SMs.
func (dv *Device) Multiprocessors() int { return dv.info.sms }

func (dv *Device) String() string {
	return fmt.Sprintf("gpu %d (%s, %s)", dv.ord, dv.info.name, dv.info.bus)
}

// MemInfo returns the device's free and total memory in bytes.
func (dv *Device) MemInfo() (free, total uint64, err error) {
	err = dv.do(func(api cu.API) (e error) { free, total, e = api.MemGetInfo(); return })
	if err != nil {
		return 0, 0, fmt.Errorf("%s: memory info: %w", dv, err)
	}
	return free, total, nil
}

// CanAccessPeer reports whether this device can map peer's memory (over
// NVLink or PCIe peer-to-peer).
func (dv *Device) CanAccessPeer(peer *Device) (bool, error) {
	ok, err := dv.drv.api.DeviceCanAccessPeer(dv.h, peer.h)
	if err != nil {
		return false, fmt.Errorf("%s: can access %s: %w", dv, peer, err)
	}
	return ok, nil
}

// EnablePeerAccess lets kernels and copies on this device read and write
// peer's memory directly. It is idempotent; access is one-way (call it on
// both devices for both ways).
func (dv *Device) EnablePeerAccess(peer *Device) error {
	if peer.drv != dv.drv || peer == dv {
		return fmt.Errorf("%s: enable peer access to %s: not another device of the same driver", dv, peer)
	}
	dv.access.mu.Lock()
	defer dv.access.mu.Unlock()
	if dv.access.peers[peer.ord] {
		return nil
	}
	err := dv.do(func(api cu.API) error { return api.CtxEnablePeerAccess(peer.ctx) })
	if err != nil && !cu.Is(err, cu.ErrorPeerAlreadyEnabled) {
		return fmt.Errorf("%s: enable peer access to %s: %w", dv, peer, err)
	}
	dv.access.peers[peer.ord] = true
	return nil
}

// reaches reports whether this device's kernels may touch memory of owner.
func (dv *Device) reaches(owner *Device) bool {
	if owner == dv {
		return true
	}
	dv.access.mu.Lock()
	defer dv.access.mu.Unlock()
	return dv.access.peers[owner.ord]
}

// errPeer is the error for an operand on a device this one cannot reach.
func (dv *Device) errPeer(what string, owner *Device) error {
	return fmt.Errorf("%s: %s lives on %s: call EnablePeerAccess first", dv, what, owner)
}

// Driver is the driver the device belongs to.
func (dv *Device) Driver() *Driver { return dv.drv }

// CanAccessPeer reports whether device ordinal a can map device ordinal b's
// memory. Unlike Device.CanAccessPeer it creates no context (retaining a
// primary context costs hundreds of MiB on that GPU), so a process can ask
// about GPUs it will never use itself.
func (d *Driver) CanAccessPeer(a, b int) (bool, error) {
	ha, err := d.api.DeviceGet(a)
	if err != nil {
		return false, fmt.Errorf("gpu %d: %w", a, err)
	}
	hb, err := d.api.DeviceGet(b)
	if err != nil {
		return false, fmt.Errorf("gpu %d: %w", b, err)
	}
	ok, err := d.api.DeviceCanAccessPeer(ha, hb)
	if err != nil {
		return false, fmt.Errorf("gpu %d: can access gpu %d: %w", a, b, err)
	}
	return ok, nil
}

// Run runs f on one locked OS thread with the device's primary context
// current, for C libraries that work on the current context (NCCL: its
// Runner has this shape).
func (dv *Device) Run(f func() error) error {
	return dv.do(func(cu.API) error { return f() })
}
