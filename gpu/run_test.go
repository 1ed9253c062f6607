package gpu_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/testenv"
)

// Test scaffolding that drives a Driver, real or fake, the same way.

// rig holds one stream per device of a driver.
type rig struct {
	drv     *gpu.Driver
	devs    []*gpu.Device
	streams []*gpu.Stream
}

// newRig opens up to want devices of drv with a stream each; it closes them
// when the test ends.
func newRig(t testing.TB, drv *gpu.Driver, want int) *rig {
	t.Helper()
	r := &rig{drv: drv}
	for i := 0; i < min(want, drv.DeviceCount()); i++ {
		dv, err := drv.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		s, err := dv.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, s.Close)
		r.devs = append(r.devs, dv)
		r.streams = append(r.streams, s)
	}
	return r
}

// openGPU opens the real driver, or skips through testenv when there is
// none (FLEXLINK_REQUIRE_GPU=1 makes that a failure).
func openGPU(t testing.TB) *gpu.Driver {
	t.Helper()
	d, err := gpu.Open()
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.MissingHardware(t, "gpu", strings.TrimPrefix(err.Error(), "gpu: "))
	}
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, d.Close)
	return d
}

// needDevices skips (through testenv) unless the rig has n devices.
func (r *rig) needDevices(t testing.TB, n int) {
	t.Helper()
	if len(r.devs) < n {
		testenv.FewerGPUs(t, n, len(r.devs))
	}
}

func (r *rig) stream(dv *gpu.Device) *gpu.Stream { return r.streams[dv.Ordinal()] }

// alloc allocates n bytes on dv, freed when the test ends.
func (r *rig) alloc(t testing.TB, dv *gpu.Device, n int) *gpu.Buffer {
	t.Helper()
	b, err := dv.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, b.Free)
	return b
}

// registeredMapping is a shared anonymous mapping of n bytes (as host
// staging shares memory between processes), unmapped when t ends, and
// its registration with dv, the caller's to free.
func registeredMapping(t testing.TB, dv *gpu.Device, n int) ([]byte, *gpu.HostMem) {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	h, err := dv.RegisterHost(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, h
}

// upload copies data into b on its device's stream and waits.
func (r *rig) upload(t testing.TB, b *gpu.Buffer, data []byte) {
	t.Helper()
	s := r.stream(b.Device())
	if err := s.CopyHtoD(b, data); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// download returns b's contents.
func (r *rig) download(t testing.TB, b *gpu.Buffer) []byte {
	t.Helper()
	s := r.stream(b.Device())
	out := make([]byte, b.Len())
	if err := s.CopyDtoH(out, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return out
}

// avgContributions is the n that avg cases divide by.
const avgContributions = 3

// checkReduce runs one case of dst = a op b on dev's stream, a on aDev and b
// on bDev, and compares with package reduce's reference.
func (r *rig) checkReduce(t *testing.T, dev, aDev, bDev *gpu.Device, dt dtype.DType, op dtype.Op, c reduceCase, seed uint64) {
	t.Helper()
	sz := dt.Size()
	a := randomElems(dt, c.count, seed)
	b := randomElems(dt, c.count, seed+1)
	bufA := r.alloc(t, aDev, (c.offA+c.count)*sz).Sub(c.offA*sz, c.count*sz)
	bufB := r.alloc(t, bDev, (c.offB+c.count)*sz).Sub(c.offB*sz, c.count*sz)
	dst := bufA
	if !c.inPlace {
		dst = r.alloc(t, dev, (c.offDst+c.count)*sz).Sub(c.offDst*sz, c.count*sz)
	}
	r.upload(t, bufA, a)
	r.upload(t, bufB, b)
	s := r.stream(dev)
	if err := s.Reduce(dst, bufA, bufB, c.count, dt, op); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(dst, c.count, dt, op, avgContributions); err != nil {
		t.Fatal(err)
	}
	want := expectReduce(t, a, b, dt, op, avgContributions)
	if d := diffElems(r.download(t, dst), want, dt); d != "" {
		t.Errorf("%s %s %s (%d elements): %s", c.name, dt, op, c.count, d)
	}
}
