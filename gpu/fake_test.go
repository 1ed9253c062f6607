package gpu_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/gpu/internal/cufake"
	"github.com/flexlink/flexlink/internal/errs"
)

// Tests of the Go side on the fake driver: they run everywhere.

func openFake(t testing.TB, cfg gpufake.Config) (*gpu.Driver, *cufake.Fake) {
	t.Helper()
	d, err := gpufake.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, d.Close)
	return d, d.Backend().(*cufake.Fake)
}

// fakeDevice is device 0 of a fake driver opened by openFake.
func fakeDevice(t testing.TB, cfg gpufake.Config) (*gpu.Device, *cufake.Fake) {
	t.Helper()
	drv, f := openFake(t, cfg)
	dv, err := drv.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return dv, f
}

// fakePeerRig is a rig of two fake GPUs, the first with peer access to
// the second.
func fakePeerRig(t *testing.T) *rig {
	t.Helper()
	drv, _ := openFake(t, gpufake.Config{})
	r := newRig(t, drv, 2)
	if err := r.devs[0].EnablePeerAccess(r.devs[1]); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFakeReduce runs every dtype × op × shape through Stream.Reduce and
// Finish on the fake, whose kernels are package reduce: it checks argument
// order, offsets, counts, in-place use and peer operands, and that every
// kernel the Go side names exists in the embedded PTX.
func TestFakeReduce(t *testing.T) {
	r := fakePeerRig(t)
	for _, dt := range dtype.All() {
		for _, op := range dtype.Ops() {
			t.Run(fmt.Sprintf("%s-%s", dt, op), func(t *testing.T) {
				for i, c := range reduceCases(1<<12 + 3) {
					r.checkReduce(t, r.devs[0], r.devs[0], r.devs[0], dt, op, c, uint64(i))
				}
				r.checkReduce(t, r.devs[0], r.devs[1], r.devs[0], dt, op, reduceCase{name: "a-on-peer", count: 33}, 5)
			})
		}
	}
}

// TestFakeErrors: misuse is reported with what, where and why, and wraps
// the sentinels callers test for.
func TestFakeErrors(t *testing.T) {
	drv, _ := openFake(t, gpufake.Config{MemPerDevice: 1 << 20})
	r := newRig(t, drv, 2)
	d0, d1, s0 := r.devs[0], r.devs[1], r.streams[0]
	b0 := r.alloc(t, d0, 4096)
	b1 := r.alloc(t, d1, 4096)
	other := mustEvent(t, d1, false)
	mod, err := d1.LoadModule([]byte(".visible .entry k(\n)"))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	k, err := mod.Function("k")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		op   func() error
		want string
		is   error
	}{
		{"alloc zero", func() error { _, err := d0.Alloc(0); return err }, "size must be positive", nil},
		{"alloc too much", func() error { _, err := d0.Alloc(2 << 20); return err },
			"gpu 0 (Fake GPU, 0000:10:00.0): alloc 2 MiB: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory", nil},
		{"copy to other device", func() error { return s0.CopyHtoD(b1, make([]byte, 4096)) }, "buffer is on gpu 1", nil},
		{"copy length", func() error { return s0.CopyHtoD(b0, make([]byte, 10)) }, "host side 10", errs.ErrMismatch},
		{"dtod length", func() error { return s0.CopyDtoD(b0, b0.Sub(0, 10)) }, "dst has 4096 bytes, src 10", errs.ErrMismatch},
		{"free sub-range", func() error { return b0.Sub(16, 16).Free() }, "sub-range", nil},
		{"reduce peer not enabled", func() error { return s0.Reduce(b0, b1, b0, 4, dtype.Float32, dtype.Sum) },
			"a lives on gpu 1", nil},
		{"reduce too many", func() error { return s0.Reduce(b0, b0, b0, 1025, dtype.Float32, dtype.Sum) },
			"dst has 4096 bytes, need 4100", errs.ErrMismatch},
		{"reduce dst elsewhere", func() error { return s0.Reduce(b1, b0, b0, 4, dtype.Float32, dtype.Sum) },
			"dst is on gpu 1", nil},
		{"reduce bad dtype", func() error { return s0.Reduce(b0, b0, b0, 4, dtype.DType(99), dtype.Sum) }, "unknown dtype", nil},
		{"reduce bad op", func() error { return s0.Reduce(b0, b0, b0, 4, dtype.Float32, dtype.Op(99)) }, "unknown dtype or op", nil},
		{"reduce negative", func() error { return s0.Reduce(b0, b0, b0, -1, dtype.Float32, dtype.Sum) }, "bad count", nil},
		{"finish zero", func() error { return s0.Finish(b0, 4, dtype.Float32, dtype.Avg, 0) }, "0 contributions", nil},
		{"scale zero", func() error { return s0.Scale(b0, b0, 4, dtype.Float32, 0) }, "divisor must be positive", nil},
		{"ipc short handle", func() error { _, err := d0.OpenIPCBuffer([]byte{1, 2, 3}, 16); return err }, "handle has 3 bytes", nil},
		{"ipc export sub-range", func() error { _, err := b0.Sub(0, 16).IPCHandle(); return err }, "whole allocation", nil},
		{"ipc plain event", func() error { _, err := other.IPCHandle(); return err }, "cuIpcGetEventHandle: CUDA_ERROR_INVALID_VALUE", nil},
		{"record other device", func() error { return s0.Record(other) }, "record an event of gpu 1", nil},
		{"since without timing", func() error { _, err := other.Since(other); return err }, "NewEvent(true)", nil},
		{"launch elsewhere", func() error { return s0.Launch(k, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}) }, "kernel is loaded on gpu 1", nil},
		{"missing kernel", func() error { _, err := mod.Function("nope"); return err }, "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND", nil},
		{"no such device", func() error { _, err := drv.Device(2); return err }, "have 2 devices", nil},
		{"peer to itself", func() error { return d0.EnablePeerAccess(d0) }, "not another device", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v does not wrap %v", err, tc.is)
			}
		})
	}
}

// TestFakeFreeTwice: second Free / Close of every kind returns ErrClosed.
func TestFakeFreeTwice(t *testing.T) {
	dv, _ := fakeDevice(t, gpufake.Config{})
	buf, _ := dv.Alloc(64)
	host, _ := dv.AllocHost(64)
	s, _ := dv.NewStream()
	ev, _ := dv.NewEvent(true)
	mod, _ := dv.LoadModule([]byte(".entry k("))
	for _, tc := range []struct {
		name  string
		close func() error
	}{
		{"buffer", buf.Free}, {"host", host.Free}, {"stream", s.Close}, {"event", ev.Close}, {"module", mod.Close},
	} {
		if err := tc.close(); err != nil {
			t.Fatalf("%s: first close: %v", tc.name, err)
		}
		if err := tc.close(); !errors.Is(err, errs.ErrClosed) {
			t.Errorf("%s: second close = %v, want ErrClosed", tc.name, err)
		}
	}
}

// TestFakeNoLeaks: everything a workload creates is given back, and Close
// releases the primary contexts.
func TestFakeNoLeaks(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fake := drv.Backend().(*cufake.Fake)
	// A subtest, so that newRig's and alloc's cleanups have run when it
	// returns.
	t.Run("work", func(t *testing.T) {
		r := newRig(t, drv, 2)
		r.checkReduce(t, r.devs[0], r.devs[0], r.devs[0], dtype.Float32, dtype.Avg, reduceCase{name: "x", count: 100}, 1)
		h, err := r.devs[1].AllocHost(100)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Free(); err != nil {
			t.Fatal(err)
		}
	})
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	a, h, s, e, m, c := fake.Live()
	if a+h+s+e+m+c != 0 {
		t.Errorf("live after close: %d allocations, %d host ranges, %d streams, %d events, %d modules, %d context references",
			a, h, s, e, m, c)
	}
}
