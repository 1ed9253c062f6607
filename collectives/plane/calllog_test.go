package plane

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/flog"
)

// fakeCaller is the communicator side of a DeviceComm: only what the
// per-call lines use is implemented (the rest panics through the nil
// embedded interface).
type fakeCaller struct {
	Caller
	lg hclog.Logger
}

func (f fakeCaller) Log() hclog.Logger { return f.lg }
func (f fakeCaller) Name() string      { return "w" }
func (f fakeCaller) Size() int         { return 2 }

// fakePlane does nothing and reports fixed link shares.
type fakePlane struct{ Plane }

func (fakePlane) Do(context.Context, *Op, *gpu.Stream) error { return nil }
func (fakePlane) LinkShares() map[string]float64 {
	return map[string]float64{"nvlink": 0.9, "pcie": 0.1}
}

func fakeDevice(t *testing.T) *gpu.Device {
	t.Helper()
	drv, err := gpufake.Open(gpufake.Config{Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := drv.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestGPUCallLines: with COLL a GPU call logs its plane and arguments at
// INFO, and at TRACE a second line with the link shares; without COLL
// nothing, at no allocation.
func TestGPUCallLines(t *testing.T) {
	dev := fakeDevice(t)
	op := &Op{Kind: AllReduce, Count: 1 << 20, DT: dtype.Float32, Op: dtype.Sum, Root: -1}
	for _, tc := range []struct {
		level        hclog.Level
		mask         flog.Subsys
		want, absent []string
	}{
		{hclog.Info, flog.Coll, []string{"gpu allreduce:", "opCount=1", "count=1048576", "datatype=" + dtype.Float32.String(), "op=sum", "nranks=2", "plane=direct"}, []string{"done", "shares="}},
		{hclog.Trace, flog.All, []string{"gpu allreduce:", "gpu allreduce done:", "shares=nvlink:0.900/pcie:0.100", "enqueue_us="}, nil},
		{hclog.Info, flog.Default, nil, []string{"allreduce"}},
		{hclog.Trace, flog.All &^ flog.Coll, nil, []string{"allreduce"}},
	} {
		var out strings.Builder
		lg := flog.New(&hclog.LoggerOptions{Level: tc.level, Output: &out}, tc.mask)
		d := NewDeviceComm(fakeCaller{lg: lg}, dev, "direct", fakePlane{})
		if err := d.do(context.Background(), op, nil); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s %s: no %q in\n%s", tc.level, tc.mask, w, out.String())
			}
		}
		for _, w := range tc.absent {
			if strings.Contains(out.String(), w) {
				t.Errorf("%s %s: %q in\n%s", tc.level, tc.mask, w, out.String())
			}
		}
		if len(tc.want) == 0 {
			if a := testing.AllocsPerRun(100, func() { _ = d.do(context.Background(), op, nil) }); a != 0 {
				t.Errorf("%s %s: a call with its line off allocates %v times", tc.level, tc.mask, a)
			}
		}
	}
}
