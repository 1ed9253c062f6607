package gpu

import (
	"fmt"
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
