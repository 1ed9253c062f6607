package direct

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
)

// The flag allreduce's failure paths on the fake driver: ranks that call
// different allreduces, and a peer that never calls. The call itself only
// enqueues, so the failure shows in AsyncError once the stream is through,
// and in the next call.

func TestGPUFakeFlagMismatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts [2]int
		op     [2]dtype.Op
	}{
		{"count", [2]int{100, 101}, [2]dtype.Op{dtype.Sum, dtype.Sum}},
		{"count-grid", [2]int{100, 300_000}, [2]dtype.Op{dtype.Sum, dtype.Sum}},
		{"op", [2]int{4096, 4096}, [2]dtype.Op{dtype.Sum, dtype.Max}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_KERNEL_TIMEOUT": "20s"}
			rs := fakeRanks(t, 2, gpufake.Config{}, env, 300_000*4)
			ctx := testCtx(t, 20*time.Second)
			start := time.Now()
			errs2 := settleOn(rs, func(r *devRank) error {
				me := r.c.Rank()
				return r.dc.AllReduce(ctx, r.a, r.b, tc.counts[me], dtype.Float32, tc.op[me], r.s)
			})
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("mismatch took %v to show (a timeout, not the signature check)", d)
			}
			for r, err := range errs2 {
				if !errors.Is(err, errs.ErrMismatch) || !strings.Contains(err.Error(), "rank "+string(rune('0'+1-r))) {
					t.Errorf("rank %d: %v, want ErrMismatch naming rank %d", r, err, 1-r)
				}
			}
			// The communicator is broken: the next call fails at once.
			errs2 = onRanks(rs, func(r *devRank) error {
				return r.dc.AllReduce(ctx, r.a, r.b, 100, dtype.Float32, dtype.Sum, r.s)
			})
			for r, err := range errs2 {
				if err == nil {
					t.Errorf("rank %d: call after a mismatch succeeded", r)
				}
			}
		})
	}
}

// settleOn runs call on every rank, then waits for its stream and returns
// what AsyncError says: a failure inside the kernels shows only there.
func settleOn(rs []*devRank, call func(r *devRank) error) []error {
	return onRanks(rs, func(r *devRank) error {
		if err := call(r); err != nil {
			return err
		}
		if err := r.s.Synchronize(); err != nil {
			return err
		}
		return r.dc.AsyncError()
	})
}

// flagKernelPair is two fake ranks whose collectives all run as flag
// kernels that give up waiting after kernelTimeout
// (FLEXLINK_GPU_KERNEL_TIMEOUT), with test buffers of 1 MiB, and the
// context their test runs under.
func flagKernelPair(t *testing.T, kernelTimeout string) ([]*devRank, context.Context) {
	t.Helper()
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_KERNEL_TIMEOUT": kernelTimeout}
	return fakeRanks(t, 2, gpufake.Config{}, env, 1<<20), testCtx(t, 20*time.Second)
}

func TestGPUFakeFlagLostPeer(t *testing.T) {
	rs, ctx := flagKernelPair(t, "300ms")
	// One call on both ranks makes the regions (on first use; a peer that
	// misses that call is TestGPUFakeFlagLostPeerFirstCall).
	if err := errors.Join(settleOn(rs, func(r *devRank) error {
		return r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s)
	})...); err != nil {
		t.Fatal(err)
	}
	r := rs[0] // rank 1 never calls
	start := time.Now()
	if err := r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %v, want about FLEXLINK_GPU_KERNEL_TIMEOUT (300ms)", d)
	}
	err := r.dc.AsyncError()
	if !errors.Is(err, errs.ErrTimeout) || !strings.Contains(err.Error(), "rank 1 on fakehost") {
		t.Fatalf("AsyncError: %v, want ErrTimeout naming rank 1 on fakehost", err)
	}
	if err := r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s); !errors.Is(err, errs.ErrTimeout) {
		t.Fatalf("next call: %v, want the recorded timeout", err)
	}
}

// TestGPUFakeFlagLostPeerFirstCall: a peer that never comes to the first
// flag call (where the ranks make their regions) fails it after
// FLEXLINK_GPU_KERNEL_TIMEOUT with ErrTimeout naming the peer, as a kernel
// waiting for it would.
func TestGPUFakeFlagLostPeerFirstCall(t *testing.T) {
	rs, ctx := flagKernelPair(t, "300ms")
	r := rs[0] // rank 1 never calls
	start := time.Now()
	err := r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s)
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %v, want about FLEXLINK_GPU_KERNEL_TIMEOUT (300ms)", d)
	}
	if !errors.Is(err, errs.ErrTimeout) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("first call: %v, want ErrTimeout naming rank 1", err)
	}
}

// TestGPUFakeFlagJobAbort: a rank whose flag kernel waits for a peer that
// will not come ends as soon as the job is aborted, long before
// FLEXLINK_GPU_KERNEL_TIMEOUT, and reports the abort: through the region's
// abort word (a copy), or, when that copy never lands (it can wait behind
// the caller's other work on the copy engines for good), through the
// host's abort word alone.
func TestGPUFakeFlagJobAbort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stuck bool // the abort copies never land
	}{{"region word", false}, {"host word alone", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var aborting atomic.Bool
			cfg := gpufake.Config{CopyStuck: func(_ uintptr, n uint64) bool { return tc.stuck && n == 8 && aborting.Load() }}
			// The kernel timeout (15 s) ends the wait when the abort does not.
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_KERNEL_TIMEOUT": "15s"}
			rs, ctx := fakeRanks(t, 2, cfg, env, 1<<20), testCtx(t, 30*time.Second)
			// One call on both ranks makes the regions (on first use).
			if err := errors.Join(onRanks(rs, func(r *devRank) error {
				return r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s)
			})...); err != nil {
				t.Fatal(err)
			}
			// Rank 1 aborts the job once rank 0's kernel has pushed its chunk into
			// rank 1's region (so it is waiting for rank 1's), which rank 1 sees
			// in its ready counter for sender 0, block 0.
			r1 := rs[1]
			region := r1.dc.Plane().(*directPlane).flag.State().Small
			before, word := make([]byte, 8), make([]byte, 8)
			if err := r1.s.CopyDtoH(before, region.Sub(gpu.FlagReadyOffset, 8)); err != nil {
				t.Fatal(err)
			}
			go func() {
				for ctx.Err() == nil {
					if err := r1.s.CopyDtoH(word, region.Sub(gpu.FlagReadyOffset, 8)); err != nil || !bytes.Equal(word, before) {
						break
					}
					runtime.Gosched()
				}
				aborting.Store(true)
				r1.c.Abort(errors.New("rank 1 gives up"))
			}()
			r := rs[0]
			start := time.Now()
			if err := r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s); err != nil {
				t.Fatal(err)
			}
			if err := r.s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the kernel ended %v after it started, want soon after the abort", d)
			}
			if err := r.dc.AsyncError(); err == nil || !strings.Contains(err.Error(), "rank 1 gives up") {
				t.Fatalf("AsyncError: %v, want the job's abort", err)
			}
		})
	}
}

// Broadcasts and reduces up to FLEXLINK_GPU_FLAG_COLL_BYTES run
// as flag kernels (no host handshake), larger ones on the handshake paths; every
// root, against the float64 reference, off-root recv untouched.
func TestGPUFakeFlagRooted(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_COLL_BYTES": "65536", "FLEXLINK_GPU_CHUNK_BYTES": "65536"}
			rs := fakeRanks(t, n, gpufake.Config{}, env, 64_000*8)
			ctx := testCtx(t, 60*time.Second)
			for _, tc := range []struct {
				count int
				flag  bool
			}{{16_000, true}, {70_000, false}} { // float32: 64000 B, 280000 B (the limit: 65536)
				for root := 0; root < n; root++ {
					for _, c := range []devCase{
						{kind: plane.Broadcast, count: tc.count, dt: dtype.Float32, root: root},
						{kind: plane.Reduce, count: tc.count, dt: dtype.Float32, op: dtype.Sum, root: root},
						{kind: plane.Reduce, count: tc.count, dt: dtype.Float32, op: dtype.Max, root: root, inPlace: true},
					} {
						before := planeCalls(rs)
						errs2 := onRanks(rs, func(r *devRank) error {
							wrong, err := runDevCase(ctx, r, c)
							if err == nil && wrong > 0 {
								err = fmt.Errorf("%d wrong elements", wrong)
							}
							return err
						})
						for i, r := range rs {
							if errs2[i] != nil {
								t.Fatalf("%v: rank %d: %v", c, i, errs2[i])
							}
							checkPath(t, fmt.Sprint(c), i, r, before[i], 0, tc.flag)
						}
					}
				}
			}
		})
	}
}

// flagPair is two fake ranks whose point-to-point groups up to 16 KiB
// (FLEXLINK_GPU_FLAG_COLL_BYTES) run as flag kernels, with test buffers of
// 128 KiB, and the context their test runs under.
func flagPair(t *testing.T) ([]*devRank, context.Context) {
	t.Helper()
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_COLL_BYTES": "16384"}
	return fakeRanks(t, 2, gpufake.Config{}, env, 1<<17), testCtx(t, 60*time.Second)
}

// bytesOf returns n bytes, byte i being f(i).
func bytesOf(n int, f func(i int) byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = f(i)
	}
	return b
}

// On two ranks a group of one send or one receive (a pipeline step) up to
// FLEXLINK_GPU_FLAG_COLL_BYTES runs as a flag kernel, larger
// ones on the handshake path; the bytes arrive whole either
// way, and steps in both directions interleave with allreduces.
func TestGPUFakeFlagSendRecv(t *testing.T) {
	rs, ctx := flagPair(t)
	pattern := func(src, n, salt int) []byte {
		return bytesOf(n, func(i int) byte { return byte(src*31 + i*7 + salt) })
	}
	for k, tc := range []struct {
		from, bytes int
		flag        bool
	}{{0, 1000, true}, {1, 16384, true}, {0, 16385, false}, {1, 4096, true}, {0, 100_000, false}, {1, 1, true}} {
		before := planeCalls(rs)
		errs2 := onRanks(rs, func(r *devRank) error {
			me, buf := r.c.Rank(), r.b.Sub(0, tc.bytes)
			if err := r.s.Memset(r.b, 0xEE); err != nil {
				return err
			}
			if me == tc.from {
				if err := r.s.CopyHtoD(buf, pattern(me, tc.bytes, k)); err != nil {
					return err
				}
				if err := r.dc.Send(ctx, buf, 1-me, r.s); err != nil {
					return err
				}
			} else if err := r.dc.Recv(ctx, buf, 1-me, r.s); err != nil {
				return err
			}
			got := make([]byte, tc.bytes+1)
			if err := r.s.CopyDtoH(got, r.b.Sub(0, tc.bytes+1)); err != nil {
				return err
			}
			if err := r.s.Synchronize(); err != nil {
				return err
			}
			want := append(pattern(tc.from, tc.bytes, k), 0xEE) // and not a byte past the message
			if me == tc.from {
				want[tc.bytes] = 0xEE
			}
			for i := range want {
				if got[i] != want[i] {
					return fmt.Errorf("byte %d = %#x, want %#x", i, got[i], want[i])
				}
			}
			// A symmetric call between steps keeps the slot credits honest.
			wrong, err := runDevCase(ctx, r, devCase{kind: plane.AllReduce, count: 3000, dt: dtype.Float32, op: dtype.Sum})
			if err == nil && wrong > 0 {
				err = fmt.Errorf("allreduce after the step: %d wrong", wrong)
			}
			return err
		})
		for i, r := range rs {
			if errs2[i] != nil {
				t.Fatalf("step %d (%d bytes from rank %d): rank %d: %v", k, tc.bytes, tc.from, i, errs2[i])
			}
			checkPath(t, fmt.Sprintf("step %d", k), i, r, before[i], 1, tc.flag) // less the allreduce's flag call
		}
	}
	// A receive of another size than the send is caught by the signature.
	errs2 := settleOn(rs, func(r *devRank) error {
		me := r.c.Rank()
		if me == 0 {
			return r.dc.Send(ctx, r.a.Sub(0, 1000), 1, r.s)
		}
		return r.dc.Recv(ctx, r.a.Sub(0, 1024), 0, r.s)
	})
	if !errors.Is(errs2[1], errs.ErrMismatch) {
		t.Errorf("receiver of a shorter send: %v, want ErrMismatch", errs2[1])
	}
}

// On two ranks a group of one send and one receive of the same size up to
// FLEXLINK_GPU_FLAG_COLL_BYTES (an exchange) runs as a flag kernel, in
// place too; larger or unequal ones on the handshake path.
func TestGPUFakeFlagExchange(t *testing.T) {
	rs, ctx := flagPair(t)
	pattern := func(src, n, salt int) []byte {
		return bytesOf(n, func(i int) byte { return byte(src*29 + i*5 + salt) })
	}
	for k, tc := range []struct {
		bytes   [2]int // what rank r sends (the peer receives as much)
		inPlace bool
		flag    bool
	}{{[2]int{1000, 1000}, false, true}, {[2]int{16384, 16384}, true, true}, {[2]int{16385, 16385}, false, false},
		{[2]int{3000, 5000}, false, false}, {[2]int{1, 1}, true, true}, {[2]int{4096, 4096}, false, true}} {
		before := planeCalls(rs)
		errs2 := onRanks(rs, func(r *devRank) error {
			me := r.c.Rank()
			sn, rn := tc.bytes[me], tc.bytes[1-me]
			snd, rcv := r.a.Sub(0, sn), r.b.Sub(0, rn)
			if tc.inPlace {
				rcv = r.a.Sub(0, rn)
			}
			if err := r.s.Memset(r.b, 0xEE); err != nil {
				return err
			}
			if err := r.s.CopyHtoD(snd, pattern(me, sn, k)); err != nil {
				return err
			}
			if err := r.dc.Group(ctx, r.s, plane.RecvFrom(1-me, rcv), plane.SendTo(1-me, snd)); err != nil {
				return err
			}
			got := make([]byte, rn)
			if err := r.s.CopyDtoH(got, rcv); err != nil {
				return err
			}
			if err := r.s.Synchronize(); err != nil {
				return err
			}
			want := pattern(1-me, rn, k)
			for i := range want {
				if got[i] != want[i] {
					return fmt.Errorf("byte %d = %#x, want %#x", i, got[i], want[i])
				}
			}
			wrong, err := runDevCase(ctx, r, devCase{kind: plane.Broadcast, count: 3000, dt: dtype.Float32, root: 1})
			if err == nil && wrong > 0 {
				err = fmt.Errorf("broadcast after the exchange: %d wrong", wrong)
			}
			return err
		})
		for i, r := range rs {
			if errs2[i] != nil {
				t.Fatalf("exchange %d (%v bytes): rank %d: %v", k, tc.bytes, i, errs2[i])
			}
			checkPath(t, fmt.Sprintf("exchange %d", k), i, r, before[i], 1, tc.flag) // less the broadcast's flag call
		}
	}
}

// Ranks that disagree on a flag reduce's, broadcast's or send/recv's root
// (both ranks sending, say) fail with the mismatch error within moments,
// naming the peer, and not only after the kernel timeout (or, for a
// broadcast whose ranks each name themselves, not at all).
func TestGPUFakeFlagRootMismatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, r *devRank) error
	}{
		{"broadcast", func(ctx context.Context, r *devRank) error {
			return r.dc.Broadcast(ctx, r.a, r.b, 5000, dtype.Float32, r.c.Rank(), r.s) // each its own root
		}},
		{"reduce", func(ctx context.Context, r *devRank) error {
			return r.dc.Reduce(ctx, r.a, r.b, 5000, dtype.Float32, dtype.Sum, r.c.Rank(), r.s)
		}},
		{"both-send", func(ctx context.Context, r *devRank) error {
			return r.dc.Send(ctx, r.a.Sub(0, 4096), 1-r.c.Rank(), r.s)
		}},
		{"send-exchange", func(ctx context.Context, r *devRank) error {
			if r.c.Rank() == 0 {
				return r.dc.Send(ctx, r.a.Sub(0, 4096), 1, r.s)
			}
			return r.dc.Group(ctx, r.s, plane.RecvFrom(0, r.b.Sub(0, 4096)), plane.SendTo(0, r.a.Sub(0, 4096)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_KERNEL_TIMEOUT": "30s"}
			rs := fakeRanks(t, 2, gpufake.Config{}, env, 1<<16)
			ctx := testCtx(t, 40*time.Second)
			start := time.Now()
			errs2 := settleOn(rs, func(r *devRank) error { return tc.call(ctx, r) })
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("mismatch took %v to show (a timeout, not the signature check)", d)
			}
			mismatch := false
			for r, err := range errs2 {
				if err == nil {
					t.Errorf("rank %d: no error", r)
				}
				if errors.Is(err, errs.ErrMismatch) && strings.Contains(err.Error(), fmt.Sprintf("rank %d", 1-r)) {
					mismatch = true
				}
			}
			if !mismatch {
				t.Errorf("no rank reported ErrMismatch naming its peer: %v", errs2)
			}
		})
	}
}

// planeCalls is every rank's count of flag calls and of handshake calls.
func planeCalls(rs []*devRank) [][2]uint64 {
	out := make([][2]uint64, len(rs))
	for i, r := range rs {
		p := r.dc.Plane().(*directPlane)
		out[i] = [2]uint64{p.flag.State().Calls, p.seq.calls}
	}
	return out
}

// checkPath checks that rank i made one call since before (planeCalls),
// besides extra flag calls, and that it took the flag kernel if flag is
// set, the handshake if not.
func checkPath(t *testing.T, what string, i int, r *devRank, before [2]uint64, extra uint64, flag bool) {
	t.Helper()
	p := r.dc.Plane().(*directPlane)
	f, shake := p.flag.State().Calls-before[0]-extra, p.seq.calls-before[1]
	if flag && (f != 1 || shake != 0) || !flag && (f != 0 || shake != 1) {
		t.Errorf("%s: rank %d made %d flag calls and %d handshakes, want the flag kernel %v", what, i, f, shake, flag)
	}
}

// LinkShares after a flag call: empty on a rank that pushed headers only
// (a broadcast's non-root, a receive, a reduce's root), all NVLink on one
// that pushed data.
func TestGPUFakeFlagLinkShares(t *testing.T) {
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1"}
	rs := fakeRanks(t, 2, gpufake.Config{}, env, 1<<16)
	ctx := testCtx(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		call func(r *devRank) error
		data [2]bool // whether rank r pushed data
	}{
		{"broadcast-root0", func(r *devRank) error { return r.dc.Broadcast(ctx, r.a, r.b, 1000, dtype.Float32, 0, r.s) }, [2]bool{true, false}},
		{"reduce-root0", func(r *devRank) error { return r.dc.Reduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, 0, r.s) }, [2]bool{false, true}},
		{"send-1-to-0", func(r *devRank) error {
			if r.c.Rank() == 1 {
				return r.dc.Send(ctx, r.a.Sub(0, 4096), 0, r.s)
			}
			return r.dc.Recv(ctx, r.b.Sub(0, 4096), 1, r.s)
		}, [2]bool{false, true}},
		{"allreduce", func(r *devRank) error { return r.dc.AllReduce(ctx, r.a, r.b, 1000, dtype.Float32, dtype.Sum, r.s) }, [2]bool{true, true}},
	} {
		errs2 := settleOn(rs, tc.call)
		for i, r := range rs {
			if errs2[i] != nil {
				t.Fatalf("%s: rank %d: %v", tc.name, i, errs2[i])
			}
			ls := r.dc.LinkShares()
			if tc.data[i] && (len(ls) == 0 || ls["nvlink"] != 1) || !tc.data[i] && len(ls) != 0 {
				t.Errorf("%s: rank %d: LinkShares %v, pushed data %v", tc.name, i, ls, tc.data[i])
			}
		}
	}
}
