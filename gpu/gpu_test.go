package gpu_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// TestGPU runs on a real GPU (it skips through testenv where there is no
// driver). Its parts share one Driver, so contexts and kernels load once.
func TestGPU(t *testing.T) {
	drv := openGPU(t)
	r := newRig(t, drv, 2)
	t.Logf("driver %s, CUDA %d.%d, %d devices", drv.Library(), drv.Version()/1000, drv.Version()%1000/10, drv.DeviceCount())
	if l, ok := drv.Backend().(*cu.Lib); ok {
		t.Logf("entry points: %s", strings.Join(l.Symbols(), " "))
	}
	t.Run("devices", func(t *testing.T) { gpuDevices(t, r) })
	t.Run("errors", func(t *testing.T) { gpuErrors(t, r) })
	t.Run("roundtrip", func(t *testing.T) { gpuRoundTrip(t, r) })
	t.Run("events", func(t *testing.T) { gpuEvents(t, r) })
	t.Run("register", func(t *testing.T) { gpuRegister(t, r) })
	t.Run("reduce", func(t *testing.T) { gpuReduce(t, r) })
	t.Run("peer", func(t *testing.T) { gpuPeer(t, r) })
	t.Run("ipc", func(t *testing.T) { gpuIPC(t, r) })
	t.Run("bandwidth", func(t *testing.T) { gpuBandwidth(t, r) })
}

func gpuDevices(t *testing.T, r *rig) {
	for _, dv := range r.devs {
		free, total, err := dv.MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		major, minor := dv.ComputeCapability()
		t.Logf("%s: sm_%d%d, %d SMs, %.1f of %.1f GiB free", dv, major, minor, dv.Multiprocessors(),
			float64(free)/(1<<30), float64(total)/(1<<30))
		if total == 0 || free > total || dv.Multiprocessors() == 0 || !strings.Contains(dv.PCIBusID(), ":") {
			t.Errorf("%s: implausible properties", dv)
		}
		for _, p := range r.devs {
			if p != dv {
				ok, err := dv.CanAccessPeer(p)
				t.Logf("%s can access %s: %v %v", dv, p, ok, err)
			}
		}
	}
}

// gpuErrors checks that driver errors carry the entry point, name and text.
func gpuErrors(t *testing.T, r *rig) {
	_, err := r.devs[0].Alloc(1 << 50)
	var e *gpu.Error
	if !errors.As(err, &e) || !strings.Contains(err.Error(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory") {
		t.Fatalf("alloc 1 PiB: %v, want a cuMemAlloc out-of-memory *gpu.Error", err)
	}
	t.Logf("alloc 1 PiB: %v", err)
	if _, err := r.devs[0].LoadModule([]byte("not ptx")); err == nil || !strings.Contains(err.Error(), "cuModuleLoadData: CUDA_ERROR_") {
		t.Errorf("load junk module: %v", err)
	} else {
		t.Logf("load junk module: %v", err)
	}
}

// gpuRoundTrip copies host -> device -> device (at an offset) -> host, with
// pageable and pinned host memory, and checks Memset.
func gpuRoundTrip(t *testing.T, r *rig) {
	dv, s := r.devs[0], r.streams[0]
	for _, n := range []int{1, 4097, 64<<20 + 3} {
		t.Run(gpu.ByteSize(n), func(t *testing.T) {
			src := pattern(n, byte(n))
			a := r.alloc(t, dv, n)
			b := r.alloc(t, dv, n+100)
			if err := s.CopyHtoD(a, src); err != nil {
				t.Fatal(err)
			}
			if err := s.CopyDtoD(b.Sub(100, n), a); err != nil {
				t.Fatal(err)
			}
			pin, err := dv.AllocHost(n)
			if err != nil {
				t.Fatal(err)
			}
			defer pin.Free()
			if err := s.CopyDtoH(pin.Bytes(), b.Sub(100, n)); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pin.Bytes(), src) {
				t.Fatalf("round trip of %d bytes through pinned memory differs", n)
			}
			if err := s.Memset(a, 0xa5); err != nil {
				t.Fatal(err)
			}
			if err := s.CopyHtoD(b.Sub(0, n), pin.Bytes()); err != nil {
				t.Fatal(err)
			}
			got := r.download(t, a)
			if bytes.Count(got, []byte{0xa5}) != n {
				t.Errorf("memset 0xa5 of %d bytes: got other bytes", n)
			}
			if !bytes.Equal(r.download(t, b.Sub(0, n)), src) {
				t.Errorf("pinned host to device copy of %d bytes differs", n)
			}
		})
	}
}

func gpuEvents(t *testing.T, r *rig) {
	dv, s := r.devs[0], r.streams[0]
	start, end := mustEvent(t, dv, true), mustEvent(t, dv, true)
	buf := r.alloc(t, dv, 256<<20)
	if err := s.Record(start); err != nil {
		t.Fatal(err)
	}
	if err := s.Memset(buf, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(end); err != nil {
		t.Fatal(err)
	}
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	done, err := end.Done()
	if err != nil || !done {
		t.Fatalf("event done after synchronize: %v %v", done, err)
	}
	d, err := end.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || d > 10*time.Second {
		t.Errorf("memset of 256 MiB took %v", d)
	}
	t.Logf("memset 256 MiB: %v (%.0f GB/s)", d, float64(256<<20)/d.Seconds()/1e9)
}

// gpuRegister pins a shared anonymous mapping, the way host staging shares
// memory between processes, and copies through it.
func gpuRegister(t *testing.T, r *rig) {
	dv, s := r.devs[0], r.streams[0]
	const n = 64 << 20
	m, h := registeredMapping(t, dv, n)
	src := pattern(n, 7)
	buf := r.alloc(t, dv, n)
	r.upload(t, buf, src)
	if err := s.CopyDtoH(h.Bytes(), buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, src) {
		t.Error("device to registered host copy differs")
	}
	if err := h.Free(); err != nil {
		t.Fatal(err)
	}
}

// gpuReduce checks every kernel (dtype × op) on several shapes against
// package reduce.
func gpuReduce(t *testing.T, r *rig) {
	dv := r.devs[0]
	start := time.Now()
	if err := dv.LoadReduceKernels(); err != nil {
		t.Fatal(err)
	}
	t.Logf("load and JIT the reduction kernels on %s: %v", dv, time.Since(start))
	for _, dt := range dtype.All() {
		for _, op := range dtype.Ops() {
			t.Run(fmt.Sprintf("%s-%s", dt, op), func(t *testing.T) {
				for i, c := range reduceCases(1<<20 + 3) {
					r.checkReduce(t, dv, dv, dv, dt, op, c, uint64(i)*7919+uint64(op))
				}
			})
		}
	}
}

// gpuPeer copies GPU0 -> GPU1 and reduces with an operand read over NVLink.
func gpuPeer(t *testing.T, r *rig) {
	r.needDevices(t, 2)
	d0, d1 := r.devs[0], r.devs[1]
	for _, p := range [][2]*gpu.Device{{d0, d1}, {d1, d0}} {
		if err := p[0].EnablePeerAccess(p[1]); err != nil {
			t.Fatal(err)
		}
	}
	const n = 64<<20 + 5
	src := pattern(n, 3)
	a := r.alloc(t, d0, n)
	b := r.alloc(t, d1, n)
	r.upload(t, a, src)
	if err := r.stream(d0).CopyDtoD(b, a); err != nil {
		t.Fatal(err)
	}
	if err := r.stream(d0).Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.download(t, b), src) {
		t.Fatal("peer copy gpu0 -> gpu1 differs")
	}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Int64} {
		for _, op := range []dtype.Op{dtype.Sum, dtype.Max} {
			r.checkReduce(t, d0, d1, d0, dt, op, reduceCase{name: "a-on-peer", count: 1<<20 + 1}, 11)
			r.checkReduce(t, d1, d0, d0, dt, op, reduceCase{name: "a-and-b-on-peer", count: 4097}, 12)
		}
	}
}
