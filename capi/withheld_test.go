package capi

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/settings"
)

// TestWithheldCollective: the last rank makes four allreduces where the
// others make five. Their fifth call ends, by its timeout
// (FLEXLINK_TIMEOUT) or by ncclCommAbort from another thread of rank 0
// (torch's watchdog), and the error, in the call's result and in
// ncclGetLastError, says that the last rank has not called that
// allreduce, with its number, and names no other rank as behind: with 3
// ranks rank 1 waits on rank 2 as much as rank 0 does. On the world and
// on a communicator split from it.
func TestWithheldCollective(t *testing.T) {
	for _, tc := range []struct {
		n            int
		abort, split bool
	}{{2, false, false}, {2, true, false}, {3, false, false}, {3, true, false}, {3, false, true}, {2, true, true}} {
		name := fmt.Sprintf("ranks=%d/abort=%v/split=%v", tc.n, tc.abort, tc.split)
		t.Run(name, func(t *testing.T) { testWithheld(t, tc.n, tc.abort, tc.split) })
	}
}

func testWithheld(t *testing.T, n int, abort, split bool) {
	timeout := "2s"
	if abort {
		timeout = "60s"
	}
	l, w := watchedLibEnv(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_TIMEOUT": timeout})
	hs := initRanks(t, l, n)
	if split {
		hs = splitRanks(t, l, hs, make([]int, n))
	}
	const calls = 4
	withholder := n - 1
	want := fmt.Sprintf("rank %d has not called AllReduce #%d", withholder, calls+1)
	var wg sync.WaitGroup
	errc := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				if got, err := allreduce(l, r, hs[r], int64(r+1)); err != nil || got != int64(n*(n+1)/2) {
					errc[r] = fmt.Errorf("call %d: %d, %v", i, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errc {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// The fifth: every rank but the last.
	inside := w.await("allreduce", "rank=0", fmt.Sprintf("opCount=%d", calls+1))
	start := time.Now()
	done := make([]chan error, withholder)
	for r := range withholder {
		done[r] = make(chan error, 1)
		go func() { _, err := allreduce(l, r, hs[r], 1); done[r] <- err }()
	}
	checked := withholder // ranks whose error must name the withholder
	if abort {
		waitOr(t, inside, 20*time.Second, "rank 0's fifth call starts", w)
		if err := l.Abort(hs[0]); err != nil {
			t.Fatal(err)
		}
		checked = 1 // the others may not have started their call yet
	}
	for r := range withholder {
		var err error
		select {
		case err = <-done[r]:
		case <-time.After(30 * time.Second):
			t.Fatalf("rank %d: the withheld call did not end in 30 s; the log:\n%s", r, w)
		}
		if err == nil {
			t.Fatalf("rank %d: the withheld call succeeded", r)
		}
		if r >= checked {
			continue
		}
		t.Logf("rank %d after %v: %v", r, time.Since(start), err)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: the call's error %q does not say %q", r, err, want)
		}
		for q := range withholder {
			if s := fmt.Sprintf("rank %d has not called", q); strings.Contains(err.Error(), s) {
				t.Errorf("rank %d: the call's error blames rank %d, which called it: %q", r, q, err)
			}
		}
		l.Report(err) // as cmd/libnccl does with every call's result
		if last := l.LastError(0); !strings.Contains(last, want) {
			t.Errorf("rank %d: ncclGetLastError(NULL) %q does not say %q", r, last, want)
		}
		if !abort {
			if last := l.LastError(hs[r]); !strings.Contains(last, want) {
				t.Errorf("rank %d: ncclGetLastError(comm) %q does not say %q", r, last, want)
			}
		}
	}
}

// watchedLibEnv is watchedLib with env.
func watchedLibEnv(env map[string]string) (*Library, *lineWatch) {
	l, w := watchedLib()
	l.env = ncclDebugEnv(settings.Map(env))
	return l, w
}
