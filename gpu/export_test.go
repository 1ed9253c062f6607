package gpu

// Internals the external tests (package gpu_test, which can import the fake
// driver in gpu/gpufake) reach.

var ByteSize = byteSize

// LoadReduceKernels loads and JIT-compiles dv's reduction kernels (timed by
// the GPU tests).
func (d *Device) LoadReduceKernels() error {
	_, err := reduceKernels(d)
	return err
}
