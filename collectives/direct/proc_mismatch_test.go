package direct

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestGPUProcsMismatch: two ranks that call different allreduces on real
// GPUs fail fast with ErrMismatch naming the other rank, however the flag
// kernels send each one: both through lines (small counts), both through
// the slots, or one each (a small count against a large one, which on the
// fake driver is TestGPUFakeFlagMismatch's count-grid case; the fake runs
// every call through the slots). One process per GPU, or both on GPU 0
// where there is one (under CUDA MPS their flag kernels run as on two
// GPUs; without it the leader path must report the mismatch as well).
func TestGPUProcsMismatch(t *testing.T) {
	drv := openGPUs(t, 1)
	gpus := drv.DeviceCount()
	for _, tc := range []struct {
		name   string
		counts [2]int
		op     [2]dtype.Op
	}{
		{"lines-count", [2]int{100, 101}, [2]dtype.Op{dtype.Sum, dtype.Sum}},
		{"lines-op", [2]int{4096, 4096}, [2]dtype.Op{dtype.Sum, dtype.Max}},
		{"lines-slots", [2]int{100, 300_000}, [2]dtype.Op{dtype.Sum, dtype.Sum}},
		{"slots-count", [2]int{300_000, 300_001}, [2]dtype.Op{dtype.Sum, dtype.Sum}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{mismatchEnv + "=" + fmt.Sprintf("%d,%d,%d,%d", tc.counts[0], tc.counts[1], tc.op[0], tc.op[1]),
				"FLEXLINK_GPU_KERNEL_TIMEOUT=60s"}
			if gpus < 2 {
				env = append(env, sharedGPUEnv+"=1")
			}
			runGPUProcs(t, 2, func(r int) int { return r % gpus }, "direct", env)
		})
	}
}

// mismatchEnv gives gpuChild the two ranks' counts and ops
// (TestGPUProcsMismatch): "count0,count1,op0,op1".
const mismatchEnv = "DIRECT_TEST_MISMATCH"

// mismatchChild makes this rank's allreduce of the pair and checks that it
// fails with ErrMismatch naming the other rank, well before the kernel
// timeout (60 s).
func mismatchChild(ctx context.Context, r *devRank, spec string) error {
	var v [4]int
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		return fmt.Errorf("%s=%q: want count0,count1,op0,op1", mismatchEnv, spec)
	}
	for i, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", mismatchEnv, spec, err)
		}
		v[i] = n
	}
	me := r.c.Rank()
	// One matching call first: the first call makes the flag region, and
	// that setup exchange would catch the mismatch before any kernel.
	if err := r.dc.AllReduce(ctx, r.a, r.b, 64, dtype.Float32, dtype.Sum, r.s); err != nil {
		return fmt.Errorf("rank %d: the matching allreduce: %w", me, err)
	}
	if err := r.s.Synchronize(); err != nil {
		return err
	}
	start := time.Now()
	err := r.dc.AllReduce(ctx, r.a, r.b, v[me], dtype.Float32, dtype.Op(v[2+me]), r.s)
	if err == nil {
		if err = r.s.Synchronize(); err == nil {
			err = r.dc.AsyncError()
		}
	}
	took := time.Since(start)
	fmt.Fprintf(os.Stderr, "rank %d: allreduce of %d elements (op %d) against %d (op %d): %v after %v\n",
		me, v[me], v[2+me], v[1-me], v[3-me], err, took.Round(time.Millisecond))
	switch {
	case err == nil:
		return fmt.Errorf("rank %d: mismatched allreduce succeeded", me)
	case !errors.Is(err, errs.ErrMismatch) && !errors.Is(err, errs.ErrAborted):
		return fmt.Errorf("rank %d: %w, want ErrMismatch (or the job's abort after the peer found it)", me, err)
	case took > 20*time.Second:
		return fmt.Errorf("rank %d: the mismatch took %v to show (a timeout, not the signature check)", me, took)
	}
	return nil
}
