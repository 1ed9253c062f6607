package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/internal/errs"
)

// lossLimit is how quickly every survivor must report a lost peer.
const lossLimit = 2 * time.Second

var failureCases = []struct {
	n    int
	algo string
	c    collCase
}{
	{4, "ring", collCase{coll: "allreduce", dt: dtype.Float32, op: dtype.Sum, count: 3000}},
	{5, "rd", collCase{coll: "allreduce", dt: dtype.Int64, op: dtype.Max, count: 300}},
	{3, "ring", collCase{coll: "allgather", dt: dtype.Float16, count: 1000}},
	{5, "ring", collCase{coll: "reducescatter", dt: dtype.Float64, op: dtype.Avg, count: 500, inPlace: true}},
	{5, "ring", collCase{coll: "broadcast", dt: dtype.Int8, count: 5000, root: 3}},
	{8, "rd", collCase{coll: "broadcast", dt: dtype.Int32, count: 2000, root: 0}},
	{5, "ring", collCase{coll: "reduce", dt: dtype.BFloat16, op: dtype.Prod, count: 2000, root: 1}},
	{8, "rd", collCase{coll: "reduce", dt: dtype.Uint8, op: dtype.Sum, count: 3000, root: 6}},
	{4, "ring", collCase{coll: "alltoall", dt: dtype.Int32, count: 400}},
}

var failCfg = func(algo string) collectives.Config {
	return collectives.Config{Algo: algo, ChunkBytes: 128}
}

// countMessages runs c once on a healthy network and returns how many
// messages it delivers, so failures can be injected in the middle.
func countMessages(t *testing.T, n int, cfg collectives.Config, c collCase) int {
	var count atomic.Int64
	w := newWorld(n, fake.Options{OnDeliver: func(int, int, int) { count.Add(1) }}, cfg)
	runCase(t, w, c)
	return int(count.Load())
}

// TestKill kills one rank in the middle of each kind of collective: every
// survivor must fail with errs.ErrPeerLost naming the dead rank within
// lossLimit — never hang, never return a wrong result as success.
func TestKill(t *testing.T) {
	for i, tc := range failureCases {
		victim := (i*5 + 1) % tc.n
		if tc.c.root == victim {
			victim = (victim + 1) % tc.n
		}
		t.Run(fmt.Sprintf("n=%d/%s/%v/victim=%d", tc.n, tc.algo, tc.c, victim), func(t *testing.T) {
			failMidway(t, tc.n, failCfg(tc.algo), tc.c, fmt.Sprintf("rank %d", victim),
				func(nw *fake.Network) { nw.Kill(victim) }, func(r int) bool { return r == victim })
		})
	}
}

// TestFailLink breaks one link in the middle of each kind of collective;
// every rank must fail with errs.ErrPeerLost.
func TestFailLink(t *testing.T) {
	for _, tc := range failureCases {
		a, b := 1, 2%tc.n
		t.Run(fmt.Sprintf("n=%d/%s/%v/link=%d-%d", tc.n, tc.algo, tc.c, a, b), func(t *testing.T) {
			failMidway(t, tc.n, failCfg(tc.algo), tc.c, "unreachable",
				func(nw *fake.Network) { nw.FailLink(a, b) }, noSilent)
		})
	}
}

// failMidway runs c and injects fail after about a third of its messages.
// Ranks run a barrier after the collective, so one whose collective
// finished before the failure must fail in the barrier.
func failMidway(t *testing.T, n int, cfg collectives.Config, c collCase, naming string, fail func(*fake.Network), silent func(int) bool) {
	total := countMessages(t, n, cfg, c)
	at := int64(total/3 + 1)
	var delivered atomic.Int64
	var failedAt atomic.Pointer[time.Time]
	var w *world
	var once sync.Once
	w = newWorld(n, fake.Options{MaxSegment: 64, OnDeliver: func(int, int, int) {
		if delivered.Add(1) == at {
			once.Do(func() {
				now := time.Now()
				failedAt.Store(&now)
				fail(w.nw)
			})
		}
	}}, cfg)
	ended := make([]time.Time, n)
	results := w.run(t, silent, func(ctx context.Context, r int, e *collectives.Engine) error {
		defer func() { ended[r] = time.Now() }()
		if _, err := c.exec(ctx, e, n, r); err != nil {
			return err
		}
		return e.Barrier(ctx)
	})
	if failedAt.Load() == nil {
		t.Fatalf("the failure was never injected (%d of %d messages delivered)", delivered.Load(), total)
	}
	for r, err := range results {
		if silent(r) {
			continue
		}
		if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), naming) {
			t.Errorf("rank %d: error %v, want one wrapping ErrPeerLost naming %q", r, err, naming)
		}
		if d := ended[r].Sub(*failedAt.Load()); d > lossLimit {
			t.Errorf("rank %d reported the failure after %v, more than %v", r, d, lossLimit)
		}
	}
	t.Logf("failure after %d of %d messages; rank 0: %v", at, total, results[0])
}

// TestTimeout leaves one rank out of a collective: every rank that called
// it must fail with errs.ErrTimeout when its deadline passes, saying what
// it was waiting for.
func TestTimeout(t *testing.T) {
	for _, tc := range failureCases[:5] {
		t.Run(fmt.Sprintf("n=%d/%s/%v", tc.n, tc.algo, tc.c), func(t *testing.T) {
			w := newWorld(tc.n, fake.Options{}, failCfg(tc.algo))
			absent := tc.n - 1
			const deadline = 100 * time.Millisecond
			results := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
				if r == absent {
					return nil
				}
				ctx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				start := time.Now()
				_, err := tc.c.exec(ctx, e, tc.n, r)
				if el := time.Since(start); el > deadline+lossLimit {
					t.Errorf("rank %d returned %v after its deadline", r, el-deadline)
				}
				return err
			})
			w.nw.Abort(errors.New("test over"))
			for r, err := range results {
				if r == absent {
					continue
				}
				if !errors.Is(err, errs.ErrTimeout) {
					t.Errorf("rank %d: error %v, want one wrapping ErrTimeout", r, err)
				}
			}
			t.Logf("rank 0: %v", results[0])
		})
	}
}

// TestCanceled checks an already-cancelled context and that a failed engine
// refuses later calls, naming the first failure.
func TestCanceled(t *testing.T) {
	w := newWorld(2, fake.Options{}, failCfg("ring"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := collectives.HostBuffer(make([]byte, 40))
	err := w.engines[0].AllReduce(ctx, b, b, 10, dtype.Float32, dtype.Sum)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("AllReduce with a cancelled context: %v, want context.Canceled", err)
	}
	err = w.engines[0].Barrier(context.Background())
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "failed earlier") {
		t.Fatalf("call after a failure: %v, want one wrapping the first failure", err)
	}
	if w.engines[0].Seq() != 1 {
		t.Fatalf("Seq after one call: %d, want 1", w.engines[0].Seq())
	}
}
