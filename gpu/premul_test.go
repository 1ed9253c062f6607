package gpu_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/reduce"
)

// TestFakePreMul runs Stream.PreMul for every dtype over the reduction
// shapes (odd counts, unaligned offsets, in place), with the scalar on the
// stream's device or on a peer, on the fake, whose kernel is
// reduce.PreMul. Floats are checked against a float64 reference too: the
// product of the two values (exact in float64 for every type but float64,
// whose own product is the reference), rounded once to the type.
func TestFakePreMul(t *testing.T) {
	r := fakePeerRig(t)
	for _, dt := range dtype.All() {
		t.Run(dt.String(), func(t *testing.T) {
			for i, c := range reduceCases(1<<12 + 3) {
				for _, scalarDev := range r.devs {
					r.checkPreMul(t, dt, c, scalarDev, uint64(i))
				}
			}
		})
	}
}

// checkPreMul runs one premul case and compares it with the references.
func (r *rig) checkPreMul(t *testing.T, dt dtype.DType, c reduceCase, scalarDev *gpu.Device, seed uint64) {
	t.Helper()
	sz := dt.Size()
	dv, s := r.devs[0], r.streams[0]
	src := randomElems(dt, c.count, seed)
	scalar := randomElems(dt, 1, seed+1000)
	if seed%3 == 0 && dt.IsFloat() { // a plain scale factor too, as FSDP's divide factor
		dtype.Put(scalar, 0, dt, 0.25)
	}
	srcBuf := r.alloc(t, dv, (c.count+c.offA)*sz).Sub(c.offA*sz, c.count*sz)
	dstBuf := r.alloc(t, dv, (c.count+c.offDst)*sz).Sub(c.offDst*sz, c.count*sz)
	if c.inPlace {
		dstBuf = srcBuf
	}
	scalarBuf := r.alloc(t, scalarDev, sz)
	r.upload(t, srcBuf, src)
	r.upload(t, scalarBuf, scalar)
	if err := s.PreMul(dstBuf, srcBuf, dt, scalarBuf); err != nil {
		t.Fatalf("%s scalar on %s: %v", c.name, scalarDev, err)
	}
	got := r.download(t, dstBuf)
	want := make([]byte, len(src))
	if err := reduce.PreMul(want, src, dt, scalar); err != nil {
		t.Fatal(err)
	}
	if d := diffElems(got, want, dt); d != "" {
		t.Fatalf("%s scalar on %s: %s", c.name, scalarDev, d)
	}
	if !dt.IsFloat() {
		return
	}
	sv := dtype.Get(scalar, 0, dt)
	for i := range c.count {
		w := dtype.Round(dtype.Get(src, i, dt)*sv, dt)
		g := dtype.Get(got, i, dt)
		if math.IsNaN(w) && math.IsNaN(g) || g == w && math.Signbit(g) == math.Signbit(w) {
			continue
		}
		t.Fatalf("%s: element %d: %v × %v = %v, float64 reference %v", c.name, i, dtype.Get(src, i, dt), sv, g, w)
	}
}

// TestFakePreMulErrors: misuse and unsupported types fail, naming what.
func TestFakePreMulErrors(t *testing.T) {
	drv, _ := openFake(t, gpufake.Config{})
	r := newRig(t, drv, 1)
	dv, s := r.devs[0], r.streams[0]
	b64, b32, b2 := r.alloc(t, dv, 64), r.alloc(t, dv, 32), r.alloc(t, dv, 2)
	for _, tc := range []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"lengths differ", s.PreMul(b64, b32, dtype.Float32, b64), "dst has 64 bytes, src 32", errs.ErrMismatch},
		{"short scalar", s.PreMul(b64, b64, dtype.Float64, b2), "scalar has 2 bytes", errs.ErrMismatch},
		{"unknown dtype", s.PreMul(b64, b64, dtype.DType(99), b64), "unknown dtype", nil},
		{"not whole elements", s.PreMul(b2, b2, dtype.Float32, b64), "not a whole number", nil},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) || tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, tc.err, tc.want)
		}
	}
}

// TestFakeFloat8NeedsSM90: on a compute capability 8.x device (the
// compute_80 PTX, which has no float8 kernels) float8 reductions, flag
// calls and premul fail with ErrNotSupported naming the type; the other
// types work.
func TestFakeFloat8NeedsSM90(t *testing.T) {
	drv, _ := openFake(t, gpufake.Config{ComputeMajor: 8, ComputeMinor: 9})
	r := newRig(t, drv, 1)
	dv, s := r.devs[0], r.streams[0]
	buf := r.alloc(t, dv, 64)
	for _, dt := range []dtype.DType{dtype.Float8E4M3, dtype.Float8E5M2} {
		for name, err := range map[string]error{
			"reduce": s.Reduce(buf, buf, buf, 64, dt, dtype.Sum),
			"scale":  s.Scale(buf, buf, 64, dt, 2),
			"premul": s.PreMul(buf, buf, dt, buf),
		} {
			if !errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), dt.String()) || !strings.Contains(err.Error(), "9.0") {
				t.Errorf("%s %s on sm_89: %v, want ErrNotSupported naming %s and 9.0", name, dt, err, dt)
			}
		}
	}
	for _, dt := range []dtype.DType{dtype.Uint32, dtype.Uint64, dtype.BFloat16} {
		if err := s.Reduce(buf, buf, buf, 64/dt.Size(), dt, dtype.Max); err != nil {
			t.Errorf("%s on sm_89: %v", dt, err)
		}
		if err := s.PreMul(buf, buf, dt, buf); err != nil {
			t.Errorf("premul %s on sm_89: %v", dt, err)
		}
	}
}
