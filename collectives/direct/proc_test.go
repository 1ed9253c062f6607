package direct

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

// Device collectives on real GPUs. CUDA IPC needs one process per rank, so
// TestGPUProcs starts a bootstrap server and runs this test binary again
// once per rank (TestMain sees gpuChildArg and runs gpuChild instead of the
// tests). Each child joins the job from the FLEXLINK_* environment like a
// program started by flexrun, runs the whole case sweep on its GPU and
// checks every element against the float64 reference. Without a GPU the
// test skips through testenv (FLEXLINK_REQUIRE_GPU=1 makes that a failure).

const gpuChildArg = "gpu-rank-child"

// gpuBig is the large count of the GPU sweep: 16M elements, so a float32
// allreduce is 64 MiB and runs the chunked, multi-stream pipeline.
const gpuBig = 16 << 20

func TestMain(m *testing.M) {
	flag.Parse()
	if a := flag.Args(); len(a) == 2 && a[0] == gpuChildArg {
		if err := gpuChild(a[1]); err != nil {
			fmt.Fprintln(os.Stderr, "gpu child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// openGPUs opens the driver or skips (fails with FLEXLINK_REQUIRE_GPU=1).
func openGPUs(t *testing.T, want int) *gpu.Driver {
	t.Helper()
	drv, err := gpu.Open()
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.MissingHardware(t, "gpu", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	if drv.DeviceCount() < want {
		testenv.FewerGPUs(t, want, drv.DeviceCount())
	}
	return drv
}

func TestGPUProcs(t *testing.T) {
	drv := openGPUs(t, 2)
	n := min(drv.DeviceCount(), 8)
	for _, tc := range []struct {
		name, path, allreduce, lanes string
		env                          []string
	}{
		// The default: every 2-rank allreduce as one flag kernel per rank.
		{"direct-flag", "direct", "read", "1", nil},
		// The flag kernel's PCIe part at a fixed share: the 64 MiB cases
		// move 30 % through the pinned inboxes (4 blocks).
		{"direct-flag-pcie", "direct", "read", "1", []string{"FLEXLINK_PCIE_SHARE=0.3", "FLEXLINK_GPU_FLAG_PCIE_BLOCKS=4"}},
		// The flag kernels for every size of every collective (the defaults
		// take reduce-scatter, allgather and alltoall up to 16 MiB per peer),
		// allreduces over 1 KiB two-shot beyond two ranks.
		{"direct-flag-all", "direct", "read", "1", []string{"FLEXLINK_GPU_FLAG_BYTES=1099511627776", "FLEXLINK_GPU_FLAG_COLL_BYTES=1099511627776", "FLEXLINK_GPU_FLAG_ONESHOT_BYTES=1024"}},
		// Few blocks and a small region: slots wrap many times per call.
		{"direct-flag-wrap", "direct", "read", "1", []string{"FLEXLINK_GPU_FLAG_BLOCKS=3", "FLEXLINK_GPU_FLAG_REGION_BYTES=1048576"}},
		// The handshake allreduces (flag kernels off).
		{"direct-push", "direct", "auto", "1", []string{"FLEXLINK_GPU_FLAG_BYTES=0"}},
		{"direct-read-2lanes", "direct", "read", "2", []string{"FLEXLINK_GPU_FLAG_BYTES=0"}},
		// A forced PCIe share on every large push, with a staging buffer
		// smaller than the PCIe part of the 64 MiB cases (capped, several
		// slots): the real memfd mapping, D2H/H2D and slot events.
		{"direct-pcie", "direct", "read", "2", []string{"FLEXLINK_GPU_FLAG_BYTES=0", "FLEXLINK_PCIE_SHARE=0.25", "FLEXLINK_PCIE_STAGING_BYTES=6291456", "FLEXLINK_GPU_ALLGATHER=push", "FLEXLINK_GPU_ALLTOALL=push"}},
		// Allgather and alltoall pulled by kernels reading the peers' sends.
		{"direct-pull", "direct", "read", "2", []string{"FLEXLINK_GPU_ALLGATHER=pull", "FLEXLINK_GPU_ALLTOALL=pull", "FLEXLINK_GPU_FLAG_COLL_BYTES=0"}},
		// Allgather and alltoall pushed by kernel stores, with a PCIe share.
		{"direct-store-pcie", "direct", "read", "1", []string{"FLEXLINK_GPU_ALLGATHER=store", "FLEXLINK_GPU_ALLTOALL=store", "FLEXLINK_PCIE_SHARE=0.25", "FLEXLINK_PCIE_STAGING_BYTES=6291456", "FLEXLINK_GPU_FLAG_COLL_BYTES=0"}},
		{"staged", "staged", "auto", "1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"FLEXLINK_GPU_ALLREDUCE=" + tc.allreduce, "FLEXLINK_GPU_COPY_STREAMS=" + tc.lanes}, tc.env...)
			runGPUProcs(t, n, func(r int) int { return r }, tc.path, env)
		})
	}
}

// TestGPUProcsShared: 2 and 4 processes on GPU 0 (ranks sharing one GPU),
// on the leader path (the default) and on the event protocol: the sweep
// against the float64 reference in real processes.
func TestGPUProcsShared(t *testing.T) {
	openGPUs(t, 1)
	for _, tc := range []struct {
		n      int
		shared string
	}{{2, "leader"}, {4, "leader"}, {2, "events"}} {
		t.Run(fmt.Sprintf("%dranks-%s", tc.n, tc.shared), func(t *testing.T) {
			runGPUProcs(t, tc.n, func(int) int { return 0 }, "direct", []string{"FLEXLINK_GPU_SHARED=" + tc.shared, sharedGPUEnv + "=1"})
		})
	}
}

// TestGPUProcsEnqueue: FLEXLINK_GPU_ENQUEUE=async on real GPUs: ranks
// sharing GPU 0 (without MPS their flag kernels serve captures only, so
// the calls run as with sync; under MPS they take every size), and one
// process per GPU with the eager flag limit set low, so that every
// collective the flag kernels serve runs as one at every size. Every
// result is checked against the float64 reference; a child still running
// after a minute prints its goroutines (to DIRECT_TEST_DUMP_DIR).
func TestGPUProcsEnqueue(t *testing.T) {
	drv := openGPUs(t, 1)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%dranks-shared", n), func(t *testing.T) {
			runGPUProcs(t, n, func(int) int { return 0 }, "direct", []string{dumpEnv + "=1", sharedGPUEnv + "=1", "FLEXLINK_GPU_ENQUEUE=async"})
		})
	}
	if g := min(drv.DeviceCount(), 8); g >= 2 {
		t.Run(fmt.Sprintf("%dranks-gpus", g), func(t *testing.T) {
			runGPUProcs(t, g, func(r int) int { return r }, "direct", []string{dumpEnv + "=1", "FLEXLINK_GPU_ENQUEUE=async", "FLEXLINK_GPU_FLAG_COLL_BYTES=4096"})
		})
	}
}

// dumpEnv tells gpuChild to print its goroutines when it still runs after
// a minute.
const dumpEnv = "DIRECT_TEST_DUMP"

// sharedGPUEnv tells gpuChild that every rank is on one GPU.
const sharedGPUEnv = "DIRECT_TEST_SHARED_GPU"

// TestGPUProcsCapture: CUDA graph capture on real GPUs, one process per
// GPU: every collective the capture path serves (captureCases, up to 1M
// elements, past the eager flag limits set low here) captured in global
// mode, replayed with new inputs between eager calls, checked against the
// float64 reference; the graphs' user objects run their destructors on the
// driver's thread.
func TestGPUProcsCapture(t *testing.T) {
	drv := openGPUs(t, 2)
	n := min(drv.DeviceCount(), 8)
	runGPUProcs(t, n, func(r int) int { return r }, "direct", []string{captureEnv + "=1", "FLEXLINK_GPU_FLAG_COLL_BYTES=65536"})
}

// captureEnv tells gpuChild to run the capture sweep (TestGPUProcsCapture).
const captureEnv = "DIRECT_TEST_CAPTURE"

// captureChild is gpuChild's capture sweep.
func captureChild(ctx context.Context, r *devRank, big int) error {
	start := time.Now()
	total, bad := 0, 0
	for _, cs := range captureCases(r.c.Size(), big) {
		wrong, err := captureRounds(ctx, r, cs, gpu.CaptureGlobal, 5)
		if err != nil {
			return fmt.Errorf("%v: %w", cs, err)
		}
		total++
		if wrong != 0 {
			bad++
		}
	}
	if err := r.dc.AsyncError(); err != nil {
		return err
	}
	fmt.Printf("rank %d: %d capture cases (5 rounds each, replays and eager) in %v, %d with wrong elements\n",
		r.c.Rank(), total, time.Since(start).Round(time.Millisecond), bad)
	if bad > 0 {
		return fmt.Errorf("%d of %d capture cases wrong", bad, total)
	}
	return r.dc.Close(ctx)
}

// runGPUProcs runs gpuChild in n processes, rank r on GPU gpuOf(r), over
// the plane path with env added, and fails on any rank's failure.
func runGPUProcs(t *testing.T, n int, gpuOf func(int) int, path string, env []string) {
	t.Helper()
	secret := []byte("flexlink-gpu-test-" + strconv.Itoa(os.Getpid()))
	job := fmt.Sprintf("gputest%d%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	srv, err := bootstrap.NewServer(bootstrap.ServerConfig{Addr: "127.0.0.1:0", Size: n, Secret: secret, JobID: job})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cache := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]string, n)
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--", gpuChildArg, path)
			cmd.Env = append(os.Environ(),
				"FLEXLINK_RANK="+strconv.Itoa(r), "FLEXLINK_WORLD_SIZE="+strconv.Itoa(n),
				"FLEXLINK_LOCAL_RANK="+strconv.Itoa(r), "FLEXLINK_LOCAL_SIZE="+strconv.Itoa(n),
				"FLEXLINK_BOOTSTRAP="+srv.Addr(), "FLEXLINK_JOB_ID="+job,
				"FLEXLINK_JOB_SECRET="+hex.EncodeToString(secret), "FLEXLINK_GPU="+strconv.Itoa(gpuOf(r)),
				"FLEXLINK_GPU_PATH="+path, "FLEXLINK_TIMEOUT=120s")
			cmd.Env = append(cmd.Env, env...)
			if !settings.OS().IsSet("FLEXLINK_CACHE_DIR") {
				cmd.Env = append(cmd.Env, "FLEXLINK_CACHE_DIR="+cache) // not the user's
			}
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		}()
	}
	wg.Wait()
	for r := 0; r < n; r++ {
		t.Logf("rank %d:\n%s", r, strings.TrimSpace(outs[r]))
		if errs[r] != nil {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
}

// gpuChild is one rank of TestGPUProcs: the sweep on GPU FLEXLINK_GPU over
// the plane path, which the ranks must have agreed on.
func gpuChild(path string) (rerr error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The driver first, so that it closes last: the communicator's GPU
	// plane (its flag watcher reads pinned memory) goes before it.
	drv, err := gpu.Open()
	if err != nil {
		return err
	}
	defer drv.Close()
	c, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ord, err := settings.OS().Int("FLEXLINK_GPU")
	if err != nil {
		return err
	}
	dev, err := drv.Device(ord)
	if err != nil {
		return err
	}
	r := &devRank{c: c}
	if r.s, err = dev.NewStream(); err != nil {
		return err
	}
	defer r.s.Close()
	big := gpuBig
	if path == "staged" {
		big = 100_000 // the host path is slow by design; its logic is the same at any size
	}
	bytes := c.Size() * big * 8
	if r.a, err = dev.Alloc(bytes); err != nil {
		return err
	}
	defer r.a.Free()
	if r.b, err = dev.Alloc(bytes); err != nil {
		return err
	}
	defer r.b.Free()
	if r.dc, err = deviceComm(ctx, c, dev); err != nil {
		return err
	}
	// On a failure too, the plane closes before the buffers and the
	// driver go (its flag watcher reads pinned memory).
	defer func() {
		if rerr != nil {
			r.dc.Close(context.Background())
		}
	}()
	if r.dc.Path() != path {
		return fmt.Errorf("rank %d: plane %s, want %s", c.Rank(), r.dc.Path(), path)
	}
	if os.Getenv(dumpEnv) == "1" {
		// A child still running after a minute prints its goroutines (a
		// hang shows where).
		dump := time.AfterFunc(time.Minute, func() {
			w := os.Stderr
			if dir := os.Getenv("DIRECT_TEST_DUMP_DIR"); dir != "" { // the GPU machine's $OUT
				if f, err := os.Create(fmt.Sprintf("%s/rank%d.stacks", dir, c.Rank())); err == nil {
					defer f.Close()
					w = f
				}
			}
			fmt.Fprintf(w, "rank %d: still running after a minute; goroutines:\n", c.Rank())
			_ = pprof.Lookup("goroutine").WriteTo(w, 2)
		})
		defer dump.Stop()
		big = 1 << 20
	}
	if os.Getenv(captureEnv) == "1" {
		return captureChild(ctx, r, 1<<20)
	}
	if spec := os.Getenv(mismatchEnv); spec != "" {
		return mismatchChild(ctx, r, spec)
	}
	total, bad := 0, 0
	start := time.Now()
	pcie := 0.0 // the largest PCIe share of a call
	for _, cs := range devCases(c.Size(), big) {
		wrong, err := runDevCase(ctx, r, cs)
		if err != nil {
			return fmt.Errorf("%v: %w", cs, err)
		}
		pcie = max(pcie, r.dc.LinkShares()["pcie"])
		total++
		if wrong != 0 {
			bad++
			fmt.Printf("rank %d: %v: %d wrong elements\n", c.Rank(), cs, wrong)
		}
	}
	if err := groupRound(ctx, r, min(1<<20, big/4)); err != nil {
		return err
	}
	var flag uint64
	if dp, ok := r.dc.Plane().(*directPlane); ok && dp.flag != nil {
		flag = dp.flag.State().Calls
	}
	if err := r.dc.AsyncError(); err != nil {
		return err
	}
	fmt.Printf("rank %d on %s: %d cases over the %s plane in %v, %d with wrong elements; group round ok; pcie share up to %.3f; %d flag allreduces\n",
		c.Rank(), dev, total, path, time.Since(start).Round(time.Millisecond), bad, pcie, flag)
	// Ranks sharing one GPU run flag kernels only under CUDA MPS (setup.go).
	shared := os.Getenv(sharedGPUEnv) == "1" && !dev.MPS()
	if want := settings.OS().String("FLEXLINK_GPU_FLAG_BYTES") != "0" && path == "direct" && !shared; want != (flag > 0) {
		return fmt.Errorf("rank %d: %d flag allreduces with FLEXLINK_GPU_FLAG_BYTES=%q", c.Rank(), flag, settings.OS().String("FLEXLINK_GPU_FLAG_BYTES"))
	}
	if settings.OS().IsSet("FLEXLINK_PCIE_SHARE") && pcie == 0 {
		return fmt.Errorf("rank %d: FLEXLINK_PCIE_SHARE is set but no call used pcie (staging not mapped? see the warnings above)", c.Rank())
	}
	if err := r.dc.Close(ctx); err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d cases wrong", bad, total)
	}
	return nil
}

// TestGPUOneProcess: two ranks as goroutines of one process on two real
// GPUs. CUDA IPC does not work within a process, so they must agree on the
// staged plane, and it must be right.
func TestGPUOneProcess(t *testing.T) {
	drv := openGPUs(t, 2)
	const n = 2
	stores := bootstrap.NewInProc(n)
	job := fmt.Sprintf("gpuone%d", os.Getpid())
	ctx := testCtx(t, 2*time.Minute)
	rs := make([]*devRank, n)
	for r := range rs {
		rs[r] = &devRank{}
	}
	errs := onRanks(rs, func(dr *devRank) error {
		r := -1
		for i := range rs {
			if rs[i] == dr {
				r = i
			}
		}
		c, err := comm.New(ctx, stores[r], comm.Options{Env: settings.Map(nil), Host: "one", JobID: job, Secret: []byte("gpu-one")})
		if err != nil {
			return err
		}
		dr.c = c
		dev, err := drv.Device(r)
		if err != nil {
			return err
		}
		if dr.s, err = dev.NewStream(); err != nil {
			return err
		}
		if dr.a, err = dev.Alloc(n * 5000 * 8); err != nil {
			return err
		}
		if dr.b, err = dev.Alloc(n * 5000 * 8); err != nil {
			return err
		}
		if dr.dc, err = deviceComm(ctx, c, dev); err != nil {
			return err
		}
		if dr.dc.Path() != "staged" {
			return fmt.Errorf("rank %d: plane %s, want staged", r, dr.dc.Path())
		}
		return nil
	})
	defer onRanks(rs, (*devRank).close)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	sweep(t, rs, devCases(n, 5000))
}
