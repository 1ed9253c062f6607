package capi

import (
	"sync"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/settings"
)

// TestSuspendResume: ncclCommSuspend and ncclCommResume on two
// communicators of ncclCommInitAll over fake GPUs: flags other than
// NCCL_SUSPEND_MEM are refused with ncclInvalidArgument; the collective
// suspend and resume succeed on both ranks at once; suspending twice and
// resuming a communicator that is not suspended are ncclInvalidUsage and
// leave it usable (the results after a resume are checked in package rank,
// TestDeviceCommSuspend).
func TestSuspendResume(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{Devices: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	l := New(Options{
		Env: settings.Map(map[string]string{
			"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_CACHE_DIR": t.TempDir(), "FLEXLINK_GPU_KERNEL_TIMEOUT": "60s",
		}),
		Memory: &fakeMem{alloc: map[uintptr]Region{}},
		Driver: func() (*gpu.Driver, error) { return drv, nil },
	})
	hs, err := l.InitAll(2, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		var wg sync.WaitGroup
		for _, h := range hs {
			wg.Add(1)
			go func() { defer wg.Done(); _ = l.Destroy(h) }()
		}
		wg.Wait()
	}()
	both := func(f func(h uintptr) error) [2]error {
		var errs [2]error
		var wg sync.WaitGroup
		for i, h := range hs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = f(h) }()
		}
		wg.Wait()
		return errs
	}
	for _, tc := range []struct {
		name string
		call func(h uintptr) error
		want Result
	}{
		{"flags 0", func(h uintptr) error { return l.Suspend(h, 0) }, InvalidArgument},
		{"flags 3", func(h uintptr) error { return l.Suspend(h, 3) }, InvalidArgument},
		{"resume unsuspended", l.Resume, InvalidUsage},
		{"suspend", func(h uintptr) error { return l.Suspend(h, SuspendMem) }, Success},
		{"suspend again", func(h uintptr) error { return l.Suspend(h, SuspendMem) }, InvalidUsage},
		{"resume", l.Resume, Success},
		{"resume again", l.Resume, InvalidUsage},
		{"suspend after resume", func(h uintptr) error { return l.Suspend(h, SuspendMem) }, Success},
		{"resume after", l.Resume, Success},
	} {
		for r, err := range both(tc.call) {
			if got := ResultOf(err); got != tc.want {
				t.Errorf("%s, rank %d: %v (%v), want %v", tc.name, r, got, err, tc.want)
			}
		}
	}
	for r, h := range hs {
		if res, err := l.AsyncError(h); err != nil || res != Success {
			t.Errorf("rank %d: async error %v %v after the usage errors, want none", r, res, err)
		}
	}
}

// TestSuspendFreesScratch: a PreMulSum on device buffers makes the C
// library's scratch; ncclCommSuspend gives every byte of GPU memory the
// communicators made back (the fake driver's free memory is what it was
// before the first call), and after ncclCommResume a PreMulSum is right.
func TestSuspendFreesScratch(t *testing.T) {
	f := newDevFixture(t, 2, gpufake.Config{})
	const count = 1 << 16
	var sends, recvs [2]*gpu.Buffer
	for r := range 2 {
		sends[r], recvs[r] = f.alloc(r, 4*count, false), f.alloc(r, 4*count, false)
		v := make([]float32, count)
		for i := range v {
			v[i] = float32(i%100 + r)
		}
		f.upload(r, sends[r], float32s(v))
	}
	var before [2]uint64
	for r := range 2 {
		if err := f.ss[r].Synchronize(); err != nil {
			t.Fatal(err)
		}
		before[r], _, _ = f.dvs[r].MemInfo()
	}
	half := float32s([]float32{0.5})
	var ops [2]int32
	for r := range 2 {
		var err error
		if ops[r], err = f.l.CreatePreMulSum(f.hs[r], half, 0, ScalarHostImmediate, ncclFloat32); err != nil {
			t.Fatal(err)
		}
	}
	premul := func() {
		t.Helper()
		if err := f.group(func(r int) Call {
			return Call{Kind: AllReduce, Send: devPtr(sends[r]), Recv: devPtr(recvs[r]), Count: count, Type: ncclFloat32, Op: ops[r], Stream: f.ss[r].Handle()}
		}); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			for i, g := range fromFloat32s(f.download(r, recvs[r], 4*count)) {
				if want := 0.5*float32(i%100) + 0.5*float32(i%100+1); g != want {
					t.Fatalf("rank %d element %d = %v, want %v", r, i, g, want)
				}
			}
		}
	}
	premul()
	both := func(call func(h uintptr) error) {
		t.Helper()
		var wg sync.WaitGroup
		var errs [2]error
		for r := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = call(f.hs[r]) }()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	both(func(h uintptr) error { return f.l.Suspend(h, SuspendMem) })
	for r := range 2 {
		free, _, _ := f.dvs[r].MemInfo()
		if free != before[r] {
			t.Errorf("rank %d: %d bytes of GPU memory still held after ncclCommSuspend", r, int64(before[r])-int64(free))
		}
	}
	both(f.l.Resume)
	premul()
}
