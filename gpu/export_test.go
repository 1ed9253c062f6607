package gpu

import "github.com/flexlink/flexlink/dtype"

// Internals the external tests (package gpu_test, which can import the fake
// driver in gpu/gpufake) reach.

var ByteSize = byteSize

// LoadReduceKernels loads dv's common and float32 kernels (timed by the
// GPU tests).
func (d *Device) LoadReduceKernels() error {
	if _, _, err := d.commonKernels(); err != nil {
		return err
	}
	_, _, err := d.typeKernels(dtype.Float32)
	return err
}

// HoldsSpareLaunchArgs reports whether s has a spare launch parameter
// block (none while a launch on s is in the driver with it).
func (s *Stream) HoldsSpareLaunchArgs() bool { return s.args.Load() != nil }
