package gpu

import (
	"fmt"

	"flexlink/gpu/internal/cu"
)

// Helpers for callers that share device memory across processes and need to
// know which allocation a Buffer was cut from (CUDA IPC exports whole
// allocations only), and for libraries that want the raw driver handles.

// Allocation returns the whole allocation b was cut from and b's byte
// offset in it. The returned Buffer shares the allocation (freeing it frees
// b's memory too).
func (b *Buffer) Allocation() (whole *Buffer, off int) {
	return &Buffer{dev: b.dev, ptr: b.own.base, n: b.own.n, own: b.own}, int(b.ptr - b.own.base)
}

// SameAllocation reports whether b and o were cut from the same allocation
// object (an allocation freed and re-made at the same address is another
// object, so this never confuses the two while either Buffer is referenced).
func (b *Buffer) SameAllocation(o *Buffer) bool { return b.own == o.own }

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

// PCIBusID is device ordinal i's PCI address, without creating a context.
func (d *Driver) PCIBusID(i int) (string, error) {
	h, err := d.api.DeviceGet(i)
	if err != nil {
		return "", fmt.Errorf("gpu %d: %w", i, err)
	}
	id, err := d.api.DevicePCIBusID(h)
	if err != nil {
		return "", fmt.Errorf("gpu %d: %w", i, err)
	}
	return id, nil
}

// Run runs f on one locked OS thread with the device's primary context
// current, for C libraries that work on the current context (NCCL: its
// Runner has this shape).
func (dv *Device) Run(f func() error) error {
	return dv.do(func(cu.API) error { return f() })
}

// Handle is the raw CUstream, for C libraries that take one (NCCL). It is
// valid until Close.
func (s *Stream) Handle() uintptr { return uintptr(s.h) }
