package capi

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/flexlink/flexlink/internal/settings"
)

// Abort, revoke and shrink with NCCL's scope, ranks as goroutines of one
// library (each on its own thread id) over a real rendezvous and links.

func scopeLib() *Library {
	return New(Options{Env: settings.Map(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_TIMEOUT": "60s"})})
}

// tidOf is rank r's thread id in these tests.
func tidOf(r int) int { return 1000 + r }

// initRanks makes an n-rank communicator, each rank from its own thread.
func initRanks(t *testing.T, l *Library, n int) []uintptr {
	t.Helper()
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	return eachRank(t, l, "init", n, nil, func(r int) (uintptr, error) { return l.InitRank(tidOf(r), n, id, r, DefaultConfig()) })
}

// eachRank has every rank of ranks (nil: all n) make a handle with f,
// each from its own thread, and returns the handles by rank; an error
// fails t naming what. The handles still live when t ends are destroyed.
func eachRank(t *testing.T, l *Library, what string, n int, ranks []int, f func(r int) (uintptr, error)) []uintptr {
	t.Helper()
	if ranks == nil {
		ranks = make([]int, n)
		for r := range ranks {
			ranks[r] = r
		}
	}
	out := make([]uintptr, n)
	errc := make([]error, n)
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() { defer wg.Done(); out[r], errc[r] = f(r) }()
	}
	wg.Wait()
	for r, err := range errc {
		if err != nil {
			t.Fatalf("%s rank %d: %v", what, r, err)
		}
	}
	destroyAtEnd(t, l, out)
	return out
}

// destroyAtEnd destroys the handles still live when the test ends.
func destroyAtEnd(t *testing.T, l *Library, hs []uintptr) {
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, h := range hs {
			if h != 0 && l.handles.get(h) != nil {
				wg.Add(1)
				go func() { defer wg.Done(); _ = l.Destroy(h) }()
			}
		}
		wg.Wait()
	})
}

// splitRanks splits every rank's handle by colors (index: rank).
func splitRanks(t *testing.T, l *Library, hs []uintptr, colors []int) []uintptr {
	t.Helper()
	return eachRank(t, l, "split", len(hs), nil, func(r int) (uintptr, error) {
		return l.Split(tidOf(r), hs[r], colors[r], 0, DefaultConfig())
	})
}

// allreduce sums v over the communicator h (from rank r's thread).
func allreduce(l *Library, r int, h uintptr, v int64) (int64, error) {
	x := v
	p := unsafe.Pointer(&x)
	err := l.Coll(tidOf(r), h, Call{Kind: AllReduce, Send: p, Recv: p, Count: 1, Type: ncclInt64, Op: 0})
	return x, err
}

// sums runs an allreduce of (rank+1) on each listed rank's handle and
// checks every result is want.
func sums(t *testing.T, what string, l *Library, hs map[int]uintptr) {
	t.Helper()
	want := int64(0)
	for r := range hs {
		want += int64(r + 1)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := allreduce(l, r, h, int64(r+1))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s: rank %d: %v", what, r, err)
			} else if got != want {
				t.Errorf("%s: rank %d: sum %d, want %d", what, r, got, want)
			}
		}()
	}
	wg.Wait()
}

// pick lists hs[r] for the ranks given, by rank.
func pick(hs []uintptr, ranks ...int) map[int]uintptr {
	m := map[int]uintptr{}
	for _, r := range ranks {
		m[r] = hs[r]
	}
	return m
}

// wantFailed checks a call that failed because another member ended the
// communicator: ncclRemoteError, and the communicator's last error names
// every one of subs.
func wantFailed(t *testing.T, what string, l *Library, h uintptr, err error, subs ...string) {
	t.Helper()
	if r := ResultOf(err); r != RemoteError {
		t.Errorf("%s: %v (%v), want ncclRemoteError", what, r, err)
		return
	}
	last := l.LastError(h)
	for _, s := range subs {
		if !strings.Contains(last, s) {
			t.Errorf("%s: ncclGetLastError %q does not name %q", what, last, s)
		}
	}
}

// TestAbortScope: ncclCommAbort of one communicator on one rank, while a
// peer waits in a call on it, fails that call and every later one on that
// communicator on every member, naming it, the rank and its host; the
// others (parent, sibling, children) keep computing right sums. Inside a
// group (NCCL ≥ 2.22's group abort) too.
func TestAbortScope(t *testing.T) {
	host, _ := os.Hostname()
	const n = 4
	colors := []int{0, 1, 0, 1} // A = {0,2}, B = {1,3}
	tests := []struct {
		name    string
		group   bool
		abortA  bool // rank 0 aborts A
		abortW  bool // rank 0 aborts the world
		aliveW  bool // the world keeps working
		aliveA  bool // A keeps working
		pending string
	}{
		{name: "child", abortA: true, aliveW: true, pending: "A"},
		{name: "child in a group", group: true, abortA: true, aliveW: true, pending: "A"},
		{name: "world", abortW: true, aliveA: true, pending: "world"},
		{name: "world and child in one group", group: true, abortA: true, abortW: true, pending: "world"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := scopeLib()
			w := initRanks(t, l, n)
			kids := splitRanks(t, l, w, colors)
			sums(t, "A before", l, pick(kids, 0, 2))
			target := kids[2]
			if tc.pending == "world" {
				target = w[2]
			}
			pending := make(chan error, 1)
			go func() { _, err := allreduce(l, 2, target, 1); pending <- err }()
			if tc.group {
				l.GroupStart(tidOf(0))
			}
			if tc.abortA {
				if err := l.Abort(kids[0]); err != nil {
					t.Fatal(err)
				}
			}
			if tc.abortW {
				if err := l.Abort(w[0]); err != nil {
					t.Fatal(err)
				}
			}
			if tc.group {
				if err := l.GroupEnd(tidOf(0)); err != nil {
					t.Fatalf("ncclGroupEnd after aborts: %v", err)
				}
			}
			wantFailed(t, "rank 2's pending call", l, target, <-pending, "communicator w", "rank 0", host, "ncclCommAbort")
			_, err := allreduce(l, 2, target, 1)
			wantFailed(t, "rank 2's later call", l, target, err, "rank 0", host)
			if tc.aliveW {
				sums(t, "parent after", l, pick(w, 0, 1, 2, 3))
			} else {
				for _, r := range []int{1, 3} {
					// The world's other members learn of it without a call
					// (the news arrives on its own: wait for it).
					<-l.handles.get(w[r]).rc.Done()
					if res, err := l.AsyncError(w[r]); err != nil || res != RemoteError {
						t.Errorf("rank %d: ncclCommGetAsyncError %v, %v; want ncclRemoteError", r, res, err)
					}
				}
			}
			if tc.aliveA {
				sums(t, "A after its parent's abort", l, pick(kids, 0, 2))
			}
			sums(t, "sibling B after", l, pick(kids, 1, 3))
		})
	}
}

// TestRevoke: ncclCommRevoke as NCCL 2.28.9 documents it: flags other than
// 0 refused; the call in flight on another member fails naming the
// revoker; later calls are refused (ncclInvalidUsage); the async error is
// ncclSuccess; a second revoke is refused; once every member revoked it,
// split, shrink (no rank excluded) and destroy work.
func TestRevoke(t *testing.T) {
	host, _ := os.Hostname()
	const n = 3
	l := scopeLib()
	w := initRanks(t, l, n)
	if err := l.Revoke(w[0], 1); ResultOf(err) != InvalidArgument {
		t.Errorf("revoke with flags 1: %v, want ncclInvalidArgument", err)
	}
	pending := make(chan error, 1)
	go func() { _, err := allreduce(l, 1, w[1], 1); pending <- err }()
	if err := l.Revoke(w[0], RevokeDefault); err != nil {
		t.Fatal(err)
	}
	wantFailed(t, "rank 1's pending call", l, w[1], <-pending, "rank 0", host, "ncclCommRevoke")
	if _, err := allreduce(l, 0, w[0], 1); ResultOf(err) != InvalidUsage || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("a call on the revoked communicator: %v, want ncclInvalidUsage naming the revoke", err)
	}
	if res, err := l.AsyncError(w[0]); err != nil || res != Success {
		t.Errorf("async error after revoke: %v, %v; want ncclSuccess", res, err)
	}
	if err := l.Revoke(w[0], RevokeDefault); ResultOf(err) != InvalidArgument {
		t.Errorf("second revoke: %v, want ncclInvalidArgument", err)
	}
	if err := l.Finalize(w[0]); ResultOf(err) != InvalidUsage {
		t.Errorf("finalize after revoke: %v, want ncclInvalidUsage", err)
	}
	if err := l.Finalize(w[1]); err != nil {
		t.Errorf("finalize on a rank that did not revoke: %v", err)
	}
	// The others revoke it too (as NCCL's users do before they split).
	for _, r := range []int{1, 2} {
		if err := l.Revoke(w[r], RevokeDefault); err != nil {
			t.Fatalf("rank %d revoke: %v", r, err)
		}
	}
	kids := splitRanks(t, l, w, []int{0, 0, 1})
	sums(t, "split of the revoked communicator", l, pick(kids, 0, 1))
	sums(t, "its one-rank sibling", l, pick(kids, 2))
	shrunk := shrinkRanks(t, l, w, []int{0, 1, 2}, nil, ShrinkDefault)
	sums(t, "shrunk after revoke", l, pick(shrunk, 0, 1, 2))
}

// shrinkRanks has the ranks listed call ncclCommShrink(exclude, flags) on
// their handles hs; it returns the new handles by rank.
func shrinkRanks(t *testing.T, l *Library, hs []uintptr, callers []int, exclude []int, flags int) []uintptr {
	t.Helper()
	return eachRank(t, l, "shrink", len(hs), callers, func(r int) (uintptr, error) {
		return l.Shrink(tidOf(r), hs[r], exclude, DefaultConfig(), flags)
	})
}

// TestShrinkLive: the others shrink a live rank away. With the default
// flags the parent (excluded rank included) keeps working; with
// NCCL_SHRINK_ABORT a call in flight on the parent ends and the parent is
// refused afterwards, on the excluded rank too.
func TestShrinkLive(t *testing.T) {
	const n = 3
	for _, flags := range []int{ShrinkDefault, ShrinkAbort} {
		t.Run(fmt.Sprintf("flags=%d", flags), func(t *testing.T) {
			l := scopeLib()
			w := initRanks(t, l, n)
			pending := make(chan error, 1)
			if flags == ShrinkAbort {
				// Rank 2 (excluded) waits in a call the others never join.
				go func() { _, err := allreduce(l, 2, w[2], 1); pending <- err }()
			}
			if _, err := l.Shrink(tidOf(0), w[0], []int{0}, DefaultConfig(), flags); ResultOf(err) != InvalidArgument {
				t.Errorf("shrink excluding the caller: %v, want ncclInvalidArgument", err)
			}
			if _, err := l.Shrink(tidOf(0), w[0], []int{2}, DefaultConfig(), 4); ResultOf(err) != InvalidArgument {
				t.Errorf("shrink with flags 4: %v, want ncclInvalidArgument", err)
			}
			shrunk := shrinkRanks(t, l, w, []int{0, 1}, []int{2}, flags)
			for _, r := range []int{0, 1} {
				if nr, rk, _, err := l.Info(shrunk[r], "ncclCommCount"); err != nil || nr != 2 || rk != r {
					t.Errorf("rank %d: shrunk communicator %d ranks, rank %d (%v); want 2, %d", r, nr, rk, err, r)
				}
			}
			sums(t, "shrunk", l, pick(shrunk, 0, 1))
			if flags == ShrinkDefault {
				sums(t, "parent after shrink", l, pick(w, 0, 1, 2))
				return
			}
			wantFailed(t, "the excluded rank's pending call", l, w[2], <-pending, "NCCL_SHRINK_ABORT")
			if _, err := allreduce(l, 0, w[0], 1); ResultOf(err) != InvalidUsage {
				t.Errorf("the parent after NCCL_SHRINK_ABORT: %v, want ncclInvalidUsage", err)
			}
		})
	}
}

// TestAbortOtherID: communicators of different ncclUniqueIds are
// independent, as in NCCL: aborting one world leaves the other working.
func TestAbortOtherID(t *testing.T) {
	const n = 2
	l := scopeLib()
	a := initRanks(t, l, n)
	b := initRanks(t, l, n)
	if err := l.Abort(a[0]); err != nil {
		t.Fatal(err)
	}
	_, err := allreduce(l, 1, a[1], 1)
	wantFailed(t, "rank 1 on the aborted world", l, a[1], err, "rank 0", "ncclCommAbort")
	sums(t, "the other id's world", l, pick(b, 0, 1))
}

// TestAbortWhileWaiting is torch's watchdog: one thread of a rank waits in
// a call that a peer never joins, another thread of the same rank aborts
// the communicator. The wait ends with an error; the peer's communicator
// ends too.
func TestAbortWhileWaiting(t *testing.T) {
	const n = 2
	l := scopeLib()
	w := initRanks(t, l, n)
	kids := splitRanks(t, l, w, []int{0, 0})
	pending := make(chan error, 1)
	go func() { _, err := allreduce(l, 0, kids[0], 1); pending <- err }()
	if err := l.Abort(kids[0]); err != nil { // from "another thread" of rank 0
		t.Fatal(err)
	}
	if err := <-pending; err == nil {
		t.Error("the waiting call succeeded after its communicator was aborted")
	}
	<-l.handles.get(kids[1]).rc.Done()
	_, err := allreduce(l, 1, kids[1], 1)
	wantFailed(t, "the peer's call", l, kids[1], err, "rank 0", "ncclCommAbort")
	sums(t, "the parent", l, pick(w, 0, 1))
}
