package capi

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

// TestInCall: the highest call that completed successfully on the
// caller's thread, after a sequence of calls that each complete or fail.
func TestInCall(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls []bool // each call's success, numbered from 1
		want  uint64
	}{
		{"none", nil, 0},
		{"one", []bool{true}, 1},
		{"three", []bool{true, true, true}, 3},
		{"the only call failed", []bool{false}, 0},
		{"the last call failed", []bool{true, true, false}, 2},
		{"a failed call, then one that completed", []bool{true, false, true}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ic inCall
			for i, ok := range tc.calls {
				seq := uint64(i + 1)
				ic.enter(seq)
				if got := ic.seq.Load(); got != seq {
					t.Fatalf("in call %d: in flight %d", seq, got)
				}
				if !ok {
					ic.fail(seq) // as nameWithheld, before leave
				}
				ic.leave()
				if got := ic.seq.Load(); got != 0 {
					t.Fatalf("after call %d: in flight %d, want none", seq, got)
				}
			}
			if got := ic.completed(); got != tc.want {
				t.Errorf("completed %d, want %d", got, tc.want)
			}
		})
	}
}

// TestStallWithdrawn: under flexrun (a fake flexrun store, newFakeFlexrun,
// whose reporters are transient members as in flexrun), ranks 0 and 2 of
// 3 wait in AllReduce #1, which rank 1 has not called, until each
// reports the stall (a timeout naming rank 1, while the call waits).
//   - When rank 1 then calls it and the call completes, each withdraws
//     its report (comm.EndResumed for AllReduce #1), and when the ranks
//     then mismatch (rank 1 calls AllGather #2 where the others call
//     AllReduce #2) that report reaches the store too, after the
//     withdrawals; the stall is never reported again.
//   - When the call fails instead (FLEXLINK_TIMEOUT), each reports the
//     timeout again (nameWithheld) and withdraws nothing.
func TestStallWithdrawn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout string // FLEXLINK_TIMEOUT: longer than stallReport and a tick
		late    bool   // rank 1 calls AllReduce #1 after the stall reports
	}{
		{name: "the call completes, then a mismatch", timeout: "60s", late: true},
		{name: "the call fails at its deadline", timeout: "9s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeFlexrun(t, true)
			vars := map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_TIMEOUT": tc.timeout}
			for k, v := range f.vars {
				vars[k] = v
			}
			l := New(Options{Env: settings.Map(vars)})
			hs := initRanks(t, l, 3)
			type result struct {
				r   int
				sum int64
				err error
			}
			results := make(chan result, 3)
			for _, r := range []int{0, 2} {
				go func() { got, err := allreduce(l, r, hs[r], int64(r+1)); results <- result{r, got, err} }()
			}
			// Both stalls reported while the calls wait.
			for range 2 {
				e := f.nextEnd(t, "the stall reports")
				if e.Kind != "timeout" || e.InCall != "AllReduce #1" || !strings.Contains(e.Text, "rank 1 has not called AllReduce #1") {
					t.Fatalf("put %+v, want a timeout in AllReduce #1 naming rank 1", e)
				}
			}
			select {
			case res := <-results:
				t.Fatalf("rank %d's allreduce ended before both stalls were reported: %v", res.r, res.err)
			default:
			}
			if !tc.late {
				// The calls fail at their deadline, naming rank 1, and report
				// it again; nothing is withdrawn.
				for range 2 {
					select {
					case res := <-results:
						if !errors.Is(res.err, errs.ErrTimeout) && !errors.Is(res.err, context.DeadlineExceeded) || !strings.Contains(res.err.Error(), "rank 1 has not called AllReduce #1") {
							t.Errorf("rank %d: %v, want a timeout naming rank 1", res.r, res.err)
						}
					case <-time.After(20 * time.Second):
						t.Fatal("the waiting allreduces did not fail within 20 s")
					}
				}
				for range 2 {
					if e := f.nextEnd(t, "the failed calls' reports"); e.Kind != "timeout" || e.InCall != "AllReduce #1" {
						t.Errorf("put %+v, want a timeout in AllReduce #1", e)
					}
				}
				// watchStalls looks every second (and at once when a
				// reported call completes): two of its ticks and a report's
				// wait pass without another put.
				quiet := time.After(2*time.Second + reportWait)
				for done := false; !done; {
					select {
					case ev := <-f.events:
						if ev.Kind == bootstrap.EventPut {
							e, _ := comm.DecodeEnd(ev.Key, ev.Value)
							t.Errorf("after the failed calls: put %+v, want none", e)
						}
					case <-quiet:
						done = true
					}
				}
				for _, r := range []int{0, 2} {
					if got := l.handles.get(hs[r]).prog.now.completed(); got != 0 {
						t.Errorf("rank %d: completed call %d, want none", r, got)
					}
				}
				return
			}
			// Rank 1 calls it late: every rank's call completes.
			go func() { got, err := allreduce(l, 1, hs[1], 2); results <- result{1, got, err} }()
			for range 3 {
				select {
				case res := <-results:
					if res.err != nil || res.sum != 6 {
						t.Fatalf("rank %d: allreduce #1 = %d, %v; want 6", res.r, res.sum, res.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("allreduce #1 did not complete within 10 s of rank 1's call")
				}
			}
			completed := time.Now()
			for range 2 {
				e := f.nextEnd(t, "the withdrawals")
				if e.Kind != comm.EndResumed || e.InCall != "AllReduce #1" || !strings.HasPrefix(e.Comm, "nccl@") || e.ClosedBy != -1 {
					t.Fatalf("put %+v, want %q for AllReduce #1", e, comm.EndResumed)
				}
			}
			t.Logf("both withdrawn %v after the call completed", time.Since(completed).Round(time.Millisecond))
			// A mismatch in the next call: rank 1 calls AllGather.
			var wg sync.WaitGroup
			errc := make([]error, 3)
			for r := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r != 1 {
						_, errc[r] = allreduce(l, r, hs[r], 1)
						return
					}
					x := make([]int64, 3)
					errc[r] = l.Coll(tidOf(r), hs[r], Call{Kind: AllGather, Send: unsafe.Pointer(&x[r]), Recv: unsafe.Pointer(&x[0]), Count: 1, Type: ncclInt64})
				}()
			}
			wg.Wait()
			mismatched := false
			for r, err := range errc {
				if err == nil {
					t.Errorf("rank %d: call #2 succeeded, want a failure", r)
				}
				mismatched = mismatched || errors.Is(err, errs.ErrMismatch)
			}
			if !mismatched {
				t.Fatalf("call #2: %v, none a collective mismatch", errc)
			}
			// The mismatch reaches the store after the withdrawals; the
			// stall is not reported again.
			for {
				e := f.nextEnd(t, "the mismatch report")
				if e.InCall == "AllReduce #1" {
					t.Errorf("put %+v: AllReduce #1 reported again", e)
				}
				if e.Kind == "mismatch" {
					if e.InCall != "AllReduce #2" && e.InCall != "AllGather #2" {
						t.Errorf("mismatch in %q, want call #2", e.InCall)
					}
					break
				}
			}
		})
	}
}
