// Package gpufake is the fake CUDA driver: a gpu.Driver backed by host
// memory, whose kernels run as Go mirrors of the PTX kernels (reductions
// through package reduce, the flag kernels through flag.go here). Tests of
// code that drives GPUs use it on machines without one; it is not linked
// into the programs.
package gpufake

import (
	"fmt"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/gpu/internal/cufake"
	"github.com/flexlink/flexlink/reduce"
)

// Config describes the machine Open simulates: number of devices,
// memory per device, compute capability, SM count, whether peers can reach
// each other. Zero fields take defaults (2 devices of 1 GiB, sm_90, 4 SMs,
// peer access possible).
type Config = cufake.Config

// Open returns a gpu.Driver backed by host memory, for tests of code that
// drives GPUs on machines without one. Streams run each operation at once;
// the reduction kernels run as package reduce on the host (the PTX is still
// loaded and its kernel names checked); contexts, devices of streams and
// buffers, and peer access are checked as the real driver checks them.
func Open(cfg Config) (*gpu.Driver, error) {
	return gpu.NewDriver(newFake(cfg), "fake")
}

// newFake is the fake driver with the kernels' host implementations.
func newFake(cfg Config) *cufake.Fake {
	f := cufake.New(cfg)
	for _, dt := range dtype.All() {
		for _, op := range gpu.ReduceOps() {
			f.RegisterKernel(gpu.ReduceKernelName(dt, op), hostReduce(dt, op))
		}
		f.RegisterKernel(gpu.ScaleKernelName(dt), hostScale(dt))
		f.RegisterKernel(gpu.PreMulKernelName(dt), hostPreMul(dt))
		for _, op := range gpu.ReduceOps() {
			f.RegisterKernel(gpu.FlagKernelName(dt, op), hostFlag(dt, op, gpu.FlagModeAR))
			f.RegisterKernel(gpu.FlagRSKernelName(dt, op), hostFlag(dt, op, gpu.FlagModeRS))
		}
	}
	f.RegisterKernel(gpu.FlagGatherKernelName, hostFlag(dtype.Uint8, dtype.Sum, gpu.FlagModeGather))
	f.RegisterKernel(gpu.CopyKernelName, hostCopy)
	f.RegisterKernel(gpu.Copy2KernelName, hostCopy2)
	return f
}

// hostCopy is flexlink_copy on the host: (dst, src, n).
func hostCopy(f *cufake.Fake, _, _ [3]uint32, params []unsafe.Pointer) error {
	v, err := kernelArgs(params, 3)
	if err != nil {
		return err
	}
	return devCopy(f, v[0], v[1], v[2])
}

// devCopy copies n bytes of device memory from src to dst.
func devCopy(f *cufake.Fake, dst, src, n uint64) error {
	d, err := f.Mem(cu.DevPtr(dst), n)
	if err != nil {
		return err
	}
	s, err := f.Mem(cu.DevPtr(src), n)
	if err != nil {
		return err
	}
	copy(d, s)
	return nil
}

// kernelArgs reads a launch's parameters, all 8 bytes (see gpu.Stream.Launch),
// as CUDA does, during the launch: the values, not the pointers, are kept.
// They come back by value (no allocation, so tests can count the
// library's own).
func kernelArgs(params []unsafe.Pointer, want int) (kargs, error) {
	var v kargs
	if len(params) != want || want > len(v) {
		return v, fmt.Errorf("fake kernel: %d parameters, want %d", len(params), want)
	}
	for i, p := range params {
		v[i] = *(*uint64)(p)
	}
	return v, nil
}

// kargs is a launch's parameter values (at most 16, as gpu.Stream.Launch).
type kargs [16]uint64

// hostReduce is flexlink_reduce_<op>_<dt> on the host:
// (dst, a, b, count) -> dst = a op b.
func hostReduce(dt dtype.DType, op dtype.Op) cufake.KernelFunc {
	return func(f *cufake.Fake, _, _ [3]uint32, params []unsafe.Pointer) error {
		v, err := kernelArgs(params, 4)
		if err != nil {
			return err
		}
		n := v[3] * uint64(dt.Size())
		bufs := make([][]byte, 3)
		for i := range bufs {
			if bufs[i], err = f.Mem(cu.DevPtr(v[i]), n); err != nil {
				return err
			}
		}
		acc := append([]byte(nil), bufs[1]...)
		if err := reduce.Reduce(acc, bufs[2], dt, op); err != nil {
			return err
		}
		copy(bufs[0], acc)
		return nil
	}
}

// hostScale is flexlink_scale_<dt> on the host: (dst, src, count, n).
func hostScale(dt dtype.DType) cufake.KernelFunc {
	return func(f *cufake.Fake, _, _ [3]uint32, params []unsafe.Pointer) error {
		v, err := kernelArgs(params, 4)
		if err != nil {
			return err
		}
		n := v[2] * uint64(dt.Size())
		dst, err := f.Mem(cu.DevPtr(v[0]), n)
		if err != nil {
			return err
		}
		src, err := f.Mem(cu.DevPtr(v[1]), n)
		if err != nil {
			return err
		}
		acc := append([]byte(nil), src...)
		if err := reduce.Finish(acc, dt, dtype.Avg, int(v[3])); err != nil {
			return err
		}
		copy(dst, acc)
		return nil
	}
}

// hostCopy2 is flexlink_copy2 on the host: (d1, d2, src, n).
func hostCopy2(f *cufake.Fake, _, _ [3]uint32, params []unsafe.Pointer) error {
	v, err := kernelArgs(params, 4)
	if err != nil {
		return err
	}
	src, err := f.Mem(cu.DevPtr(v[2]), v[3])
	if err != nil {
		return err
	}
	for _, d := range v[:2] {
		dst, err := f.Mem(cu.DevPtr(d), v[3])
		if err != nil {
			return err
		}
		copy(dst, src)
	}
	return nil
}

// hostPreMul is flexlink_premul_<dt> on the host: (dst, src, count, scalar)
// -> dst = src × *scalar, through reduce.PreMul.
func hostPreMul(dt dtype.DType) cufake.KernelFunc {
	return func(f *cufake.Fake, _, _ [3]uint32, params []unsafe.Pointer) error {
		v, err := kernelArgs(params, 4)
		if err != nil {
			return err
		}
		n := v[2] * uint64(dt.Size())
		dst, err := f.Mem(cu.DevPtr(v[0]), n)
		if err != nil {
			return err
		}
		src, err := f.Mem(cu.DevPtr(v[1]), n)
		if err != nil {
			return err
		}
		scalar, err := f.Mem(cu.DevPtr(v[3]), uint64(dt.Size()))
		if err != nil {
			return err
		}
		acc := make([]byte, len(src))
		if err := reduce.PreMul(acc, src, dt, append([]byte(nil), scalar...)); err != nil {
			return err
		}
		copy(dst, acc)
		return nil
	}
}
