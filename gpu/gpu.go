// Package gpu is flexlink's CUDA layer: the driver API loaded at run time
// (libcuda.so.1 through purego, no cgo), devices and their primary contexts,
// streams and events, device memory (Buffer), pinned and registered host
// memory (HostMem), CUDA IPC handles for memory and events, PTX modules, and
// the reduction kernels the collectives run on device buffers.
//
// # Loading
//
// Open loads the driver. On a machine without one it returns an error that
// wraps errs.ErrNotSupported and keeps dlopen's message; tests turn that into
// a skip through internal/testenv. gpufake.Open (package gpu/gpufake) gives a Driver backed by host
// memory (see internal/cufake) for tests of code above this package.
//
// # Contexts and threads
//
// The driver API binds a context to the calling OS thread, and Go moves
// goroutines between threads at any call. So this package never relies on a
// context being current: every method that needs one locks its goroutine to
// its OS thread, makes its device's primary context current, calls the
// driver, and unlocks, all inside the one method. Callers need not call
// runtime.LockOSThread or manage contexts, and may use any object from any
// goroutine. (The primary context may stay current on that thread
// afterwards; that is harmless and the same context every CUDA library in the
// process shares.) The cost is one cuCtxGetCurrent per call (a read of the
// thread's state), and a cuCtxSetCurrent only where another context, or
// none, is current.
//
// # Concurrency and ownership
//
// Driver, Device, Stream and Event methods are safe for concurrent use, like
// the driver calls beneath them. Work on one Stream runs in the order it was
// enqueued; asynchronous methods (the Copy…, Memset, Reduce, Scale and
// Record methods of Stream) return once the work is enqueued, and the memory
// they name must stay allocated and, for host memory, unmodified until the
// stream has passed them (Synchronize, or an Event recorded after them).
// Freeing is the caller's job: Free / Close every object before
// Driver.Close.
package gpu

import (
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

// Error is a failed driver call. Its message reads
// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory"; errors returned by
// this package wrap it with what was being done. Match with errors.As.
type Error = cu.Error

// Driver is the loaded CUDA driver. Get one with Open; Close it last.
type Driver struct {
	api       cu.API
	lib       string // library path, or "fake"
	ptxFile   string // FLEXLINK_GPU_PTX: one PTX file replaces the compiled kernels
	kernelDir string // FLEXLINK_GPU_KERNELS: a directory of compiled kernels replaces the embedded ones
	version   int
	count     int

	mu     sync.Mutex
	devs   []*Device // retained primary contexts, by ordinal; nil until Device(i)
	closed bool
	log    hclog.Logger // SetLogger; nil: none
}

// Open loads libcuda.so.1, initialises the driver and counts the devices.
// Without a usable driver or device the error wraps errs.ErrNotSupported and
// carries the loader's or the driver's message.
func Open() (*Driver, error) {
	l, err := cu.Load(cu.DefaultLibrary)
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	d, err := NewDriver(l, l.Path())
	if err != nil {
		return nil, err
	}
	d.ptxFile = settings.OS().String("FLEXLINK_GPU_PTX")
	d.kernelDir = settings.OS().String("FLEXLINK_GPU_KERNELS")
	return d, nil
}

// SetLogger gives the driver a logger for what it does on its own (the
// kernel loads, at INFO); the first logger set stays. Communicators set
// theirs when they first use a device.
func (d *Driver) SetLogger(lg hclog.Logger) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.log == nil && lg != nil {
		d.log = lg
	}
}

// logger is the driver's logger, or one that discards.
func (d *Driver) logger() hclog.Logger {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.log == nil {
		return hclog.NewNullLogger()
	}
	return d.log
}

// NewDriver wraps a driver API (the real library, or the fake of gpu/gpufake)
// and checks it. lib names it in errors and reports.
func NewDriver(api cu.API, lib string) (*Driver, error) {
	v, err := api.DriverVersion()
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	n, err := api.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	if n == 0 {
		return nil, fmt.Errorf("gpu: %s loaded but reports no device: %w", lib, errs.ErrNotSupported)
	}
	return &Driver{api: api, lib: lib, version: v, count: n, devs: make([]*Device, n)}, nil
}

// Library names what was loaded: the driver library's path, or "fake".
func (d *Driver) Library() string { return d.lib }

// Version is the CUDA version the driver supports, as 1000*major + 10*minor
// (13000 for CUDA 13.0).
func (d *Driver) Version() int { return d.version }

// DeviceCount is the number of GPUs the driver sees (honouring
// CUDA_VISIBLE_DEVICES).
func (d *Driver) DeviceCount() int { return d.count }

// Device returns GPU i, retaining its primary context the first time. Later
// calls return the same *Device.
func (d *Driver) Device(i int) (*Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("gpu: device %d: driver %w", i, errs.ErrClosed)
	}
	if i < 0 || i >= d.count {
		return nil, fmt.Errorf("gpu: device %d: have %d devices", i, d.count)
	}
	if d.devs[i] == nil {
		dv, err := openDevice(d, i)
		if err != nil {
			return nil, err
		}
		d.devs[i] = dv
	}
	return d.devs[i], nil
}

// Close releases the primary contexts that Device retained. Objects made
// from the driver must be freed first; using them afterwards fails or
// misbehaves as the driver decides. Close is idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var first error
	for _, dv := range d.devs {
		if dv == nil {
			continue
		}
		if err := dv.release(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Backend returns the driver API behind d: the real library (*cu.Lib) or the
// fake (gpu/gpufake). Only gpu's own sub-packages and tests can name those
// types (they are internal to gpu/).
func (d *Driver) Backend() cu.API { return d.api }
