package capi

import (
	"sync"
	"testing"

	"flexlink/gpu"
	"flexlink/gpu/gpufake"
	"flexlink/internal/settings"
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
