package nccl

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// testCUDA is the little of the CUDA driver API the GPU test needs beyond
// package gpu, which exports neither its devices' contexts nor a way to make
// one current around foreign calls: the primary context of one device (the
// one package gpu uses too), a Runner that makes it current, and a
// synchronisation of everything in it. The test runs NCCL on the legacy
// default stream (0) and synchronises it with ctxSynchronize.
type testCUDA struct {
	ctxSetCurrent, ctxSynchronize uintptr
	ctx                           uintptr
}

// cuCall calls a driver entry point and turns a non-zero CUresult into an
// error.
//
//go:uintptrescapes
func cuCall(name string, fn uintptr, args ...uintptr) error {
	if r, _, _ := purego.SyscallN(fn, args...); int32(uint32(r)) != 0 {
		return fmt.Errorf("%s: CUresult %d", name, int32(uint32(r)))
	}
	return nil
}

// openTestCUDA retains device ordinal's primary context, releasing it when
// the test ends. The caller has already opened package gpu, so the driver
// exists.
func openTestCUDA(t *testing.T, ordinal int) *testCUDA {
	t.Helper()
	h, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	fn := map[string]uintptr{}
	for _, name := range []string{"cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
		"cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuCtxSynchronize"} {
		if fn[name], err = purego.Dlsym(h, name); err != nil {
			t.Fatal(err)
		}
	}
	var dev int32
	c := &testCUDA{ctxSetCurrent: fn["cuCtxSetCurrent"], ctxSynchronize: fn["cuCtxSynchronize"]}
	if err := cuCall("cuInit", fn["cuInit"], 0); err != nil {
		t.Fatal(err)
	}
	if err := cuCall("cuDeviceGet", fn["cuDeviceGet"], uintptr(unsafe.Pointer(&dev)), uintptr(ordinal)); err != nil {
		t.Fatal(err)
	}
	if err := cuCall("cuDevicePrimaryCtxRetain", fn["cuDevicePrimaryCtxRetain"], uintptr(unsafe.Pointer(&c.ctx)), uintptr(dev)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cuCall("cuDevicePrimaryCtxRelease", fn["cuDevicePrimaryCtxRelease_v2"], uintptr(dev)); err != nil {
			t.Error(err)
		}
	})
	return c
}

// run is a Runner: call runs on a locked thread with the context current.
func (c *testCUDA) run(call func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuCall("cuCtxSetCurrent", c.ctxSetCurrent, c.ctx); err != nil {
		return err
	}
	return call()
}

// synchronize waits for all work in the context; call it through run.
func (c *testCUDA) synchronize() error { return cuCall("cuCtxSynchronize", c.ctxSynchronize) }
