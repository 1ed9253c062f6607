package gpu_test

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/gpu/kernels"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestFakeContextsAcrossGoroutines: many goroutines drive both devices at
// once. The fake checks, per OS thread, that the context current at each
// call is the one of the stream and memory used, so a method that let its
// goroutine migrate between cuCtxSetCurrent and its call, or forgot the
// context, fails here.
func TestFakeContextsAcrossGoroutines(t *testing.T) {
	drv, _ := openFake(t, gpufake.Config{})
	const workers, rounds = 8, 50
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errc <- ctxWorker(drv, w%2, rounds, byte(w))
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
}

func ctxWorker(drv *gpu.Driver, dev, rounds int, seed byte) error {
	dv, err := drv.Device(dev)
	if err != nil {
		return err
	}
	s, err := dv.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	for i := 0; i < rounds; i++ {
		data := pattern(1000+i, seed)
		b, err := dv.Alloc(len(data))
		if err != nil {
			return err
		}
		out := make([]byte, len(data))
		if err := errors.Join(s.CopyHtoD(b, data), s.CopyDtoH(out, b), s.Synchronize(), b.Free()); err != nil {
			return err
		}
		if !bytes.Equal(out, data) {
			return fmt.Errorf("worker on gpu %d round %d: data differs", dev, i)
		}
	}
	return nil
}

// TestFakeLaunchGeometry: one thread per 16-byte vector, 512-thread blocks,
// at most one wave (4 blocks per SM).
func TestFakeLaunchGeometry(t *testing.T) {
	drv, fake := openFake(t, gpufake.Config{SMs: 4, MemPerDevice: 64 << 20})
	r := newRig(t, drv, 1)
	buf := r.alloc(t, r.devs[0], 32<<20)
	for _, tc := range []struct {
		count int
		dt    dtype.DType
		grid  uint32
	}{
		{1, dtype.Float32, 1},
		{2048, dtype.Float32, 1},        // 512 vectors
		{2049, dtype.Float32, 2},        // 513 vectors
		{2048 * 8, dtype.Int8, 2},       // 1024 vectors
		{4 << 20, dtype.Float64, 16},    // capped at 4 SMs × 4
		{5 * 512 * 8, dtype.Float16, 5}, // 2560 vectors
	} {
		if err := r.streams[0].Reduce(buf, buf, buf, tc.count, tc.dt, dtype.Max); err != nil {
			t.Fatal(err)
		}
		_, grid, block := fake.Launches(gpu.ReduceKernelName(tc.dt, dtype.Max))
		if grid != [3]uint32{tc.grid, 1, 1} || block != [3]uint32{512, 1, 1} {
			t.Errorf("%d × %s: grid %v block %v, want grid %d of 512", tc.count, tc.dt, grid, block, tc.grid)
		}
	}
}

// TestFakeFinish: Finish launches the scale kernel for Avg with n > 1 only.
func TestFakeFinish(t *testing.T) {
	drv, fake := openFake(t, gpufake.Config{})
	r := newRig(t, drv, 1)
	buf := r.alloc(t, r.devs[0], 64)
	for _, tc := range []struct {
		op     dtype.Op
		n      int
		launch int
	}{
		{dtype.Sum, 4, 0}, {dtype.Prod, 4, 0}, {dtype.Min, 4, 0}, {dtype.Max, 4, 0},
		{dtype.Avg, 1, 0}, {dtype.Avg, 4, 1},
	} {
		before, _, _ := fake.Launches(gpu.ScaleKernelName(dtype.Int32))
		if err := r.streams[0].Finish(buf, 16, dtype.Int32, tc.op, tc.n); err != nil {
			t.Fatal(err)
		}
		after, _, _ := fake.Launches(gpu.ScaleKernelName(dtype.Int32))
		if after-before != tc.launch {
			t.Errorf("finish %s over %d: %d scale launches, want %d", tc.op, tc.n, after-before, tc.launch)
		}
	}
}

// TestFakeIPC: a handle exported on one device opens on another and aliases
// the same memory.
func TestFakeIPC(t *testing.T) {
	drv, _ := openFake(t, gpufake.Config{})
	r := newRig(t, drv, 2)
	src := r.alloc(t, r.devs[0], 4096)
	r.upload(t, src, pattern(4096, 1))
	h, err := src.IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	view, err := r.devs[1].OpenIPCBuffer(h, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.download(t, view), pattern(4096, 1)) {
		t.Error("IPC view does not show the exporter's data")
	}
	r.upload(t, view, pattern(4096, 2))
	if !bytes.Equal(r.download(t, src), pattern(4096, 2)) {
		t.Error("write through the IPC view is not visible to the exporter")
	}
	if _, err := view.IPCHandle(); err == nil {
		t.Error("re-exporting an IPC view succeeded")
	}
	if err := view.Free(); err != nil {
		t.Fatal(err)
	}
	ev, err := r.devs[0].NewIPCEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	eh, err := ev.IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	opened, err := r.devs[1].OpenIPCEvent(eh)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(r.streams[1].Wait(opened), opened.Synchronize(), opened.Close()); err != nil {
		t.Fatal(err)
	}
}

// TestFakeHostMemory: pinned allocations and registered mappings carry
// data both ways; a range cannot be registered twice.
func TestFakeHostMemory(t *testing.T) {
	drv, _ := openFake(t, gpufake.Config{})
	r := newRig(t, drv, 1)
	dv, s := r.devs[0], r.streams[0]
	m, reg := registeredMapping(t, dv, 1<<16)
	if _, err := dv.RegisterHost(m[4096:]); err == nil {
		t.Error("registering an overlapping range succeeded")
	}
	pin, err := dv.AllocHost(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	copy(pin.Bytes(), pattern(1<<16, 4))
	buf := r.alloc(t, dv, 1<<16)
	if err := errors.Join(s.CopyHtoD(buf, pin.Bytes()), s.CopyDtoH(reg.Bytes(), buf), s.Synchronize()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, pattern(1<<16, 4)) {
		t.Error("pinned -> device -> registered copy differs")
	}
	if err := errors.Join(reg.Free(), pin.Free()); err != nil {
		t.Fatal(err)
	}
}

// TestFakeEvents: timing events measure the (fake, 1 ms per operation)
// time between them.
func TestFakeEvents(t *testing.T) {
	drv, _ := openFake(t, gpufake.Config{})
	r := newRig(t, drv, 1)
	dv, s := r.devs[0], r.streams[0]
	start, _ := dv.NewEvent(true)
	end, _ := dv.NewEvent(true)
	defer start.Close()
	defer end.Close()
	buf := r.alloc(t, dv, 64)
	if err := errors.Join(s.Record(start), s.Memset(buf, 1), s.Memset(buf, 2), s.Record(end)); err != nil {
		t.Fatal(err)
	}
	d, err := end.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if d != 3*time.Millisecond { // two memsets and the second record
		t.Errorf("Since = %v, want 3ms of fake time", d)
	}
	if done, err := end.Done(); !done || err != nil {
		t.Errorf("Done = %v, %v", done, err)
	}
}

// TestFakeComputeCapability: devices of compute capability 8.0 and later
// load the compiled kernels (sm_80 code on 8.6, sm_100's PTX on 12.0) and
// reduce; older ones are not supported; float8 needs 9.0.
func TestFakeComputeCapability(t *testing.T) {
	for _, tc := range []struct {
		major, minor int
		ok, fp8      bool
		code         string
	}{{9, 0, true, true, "sass"}, {8, 6, true, false, "sass"}, {8, 0, true, false, "sass"}, {10, 0, true, true, "sass"},
		{12, 0, true, true, "ptx"}, {7, 5, false, false, ""}} {
		t.Run(fmt.Sprintf("sm_%d%d", tc.major, tc.minor), func(t *testing.T) {
			drv, _ := openFake(t, gpufake.Config{ComputeMajor: tc.major, ComputeMinor: tc.minor})
			r := newRig(t, drv, 1)
			buf := r.alloc(t, r.devs[0], 64)
			err := r.streams[0].Reduce(buf, buf, buf, 16, dtype.BFloat16, dtype.Sum)
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok {
				if !errors.Is(err, errs.ErrNotSupported) {
					t.Fatalf("reduce on sm_%d%d = %v, want ErrNotSupported", tc.major, tc.minor, err)
				}
				return
			}
			loads := r.devs[0].KernelLoads()
			if len(loads) != 1 || loads[0].Family != "bf16" || loads[0].Code != tc.code {
				t.Errorf("loads %+v, want one: bf16 from %s code", loads, tc.code)
			}
			err = r.streams[0].Reduce(buf, buf, buf, 16, dtype.Float8E4M3, dtype.Max)
			if tc.fp8 != (err == nil) || (!tc.fp8 && !errors.Is(err, errs.ErrNotSupported)) {
				t.Errorf("float8 reduce on sm_%d%d = %v, want supported %v", tc.major, tc.minor, err, tc.fp8)
			}
		})
	}
}

// TestEmbeddedKernels: every family's fatbin declares exactly the kernels
// the Go side launches from it (the fake driver reads the PTX inside).
func TestEmbeddedKernels(t *testing.T) {
	set, ok := kernels.Embedded()
	if !ok {
		t.Fatal("this build carries no kernels")
	}
	entry := regexp.MustCompile(`\.visible \.entry (\w+)\(`)
	want := map[string][]string{kernels.Common: {gpu.CopyKernelName, gpu.Copy2KernelName, gpu.FlagGatherKernelName}}
	for _, dt := range dtype.All() {
		names := []string{gpu.ScaleKernelName(dt), gpu.PreMulKernelName(dt)}
		for _, op := range gpu.ReduceOps() {
			names = append(names, gpu.ReduceKernelName(dt, op), gpu.FlagKernelName(dt, op), gpu.FlagRSKernelName(dt, op))
		}
		fam := strings.TrimPrefix(gpu.ScaleKernelName(dt), "flexlink_scale_")
		want[fam] = names
	}
	if got := len(set.Manifest().Families); got != len(want) {
		t.Errorf("%d families, want %d", got, len(want))
	}
	for fam, names := range want {
		b, err := set.Fatbin(fam)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, m := range entry.FindAllSubmatch(b, -1) {
			have[string(m[1])] = true
		}
		for _, n := range names {
			if !have[n] {
				t.Errorf("%s: no kernel %s", fam, n)
			}
		}
		if len(have) != len(names) {
			t.Errorf("%s: %d kernels, want %d (only its own)", fam, len(have), len(names))
		}
		if !bytes.Contains(b, []byte(".target sm_100")) {
			t.Errorf("%s: no sm_100 PTX", fam)
		}
	}
}

// TestKernelsLoadedBeforeLaunch: every kernel's code is loaded when its
// module is (FuncLoad at lookup), so no launch loads code lazily. With
// the driver's lazy loading a first launch may wait for the context to go
// idle, which deadlocks a launch from the enqueue-and-return engine while
// a caller's stream waits for it. The fake counts launches of functions
// no FuncLoad loaded.
func TestKernelsLoadedBeforeLaunch(t *testing.T) {
	drv, fake := openFake(t, gpufake.Config{})
	r := newRig(t, drv, 1)
	dv, s := r.devs[0], r.streams[0]
	if err := dv.LoadKernels(); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	a, b, c := r.alloc(t, dv, 4*n), r.alloc(t, dv, 4*n), r.alloc(t, dv, 4*n)
	steps := []struct {
		what string
		run  func() error
	}{
		{"reduce", func() error { return s.Reduce(a, b, c, n, dtype.Float32, dtype.Sum) }},
		{"finish", func() error { return s.Finish(a, n, dtype.Float32, dtype.Avg, 2) }},
		{"copy2", func() error { return s.Copy2(a, b, c) }},
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := fake.Launches(gpu.Copy2KernelName); n == 0 {
		t.Fatal("no copy2 launch counted: the check below would prove nothing")
	}
	if lazy := fake.LazyLoads(); lazy != 0 {
		t.Errorf("%d launches loaded their kernel's code lazily, want 0", lazy)
	}
}
