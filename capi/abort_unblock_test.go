package capi

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/flog"
	"github.com/flexlink/flexlink/internal/settings"
)

// lineWatch is a log output that tells when a line holding given words is
// written: a test waits for the line that shows a rank is inside the call
// it is about to abort (no sleep standing in for "it has started").
type lineWatch struct {
	mu      sync.Mutex
	partial string
	watches []watch
	all     strings.Builder
}

type watch struct {
	words []string
	seen  chan struct{}
}

// await returns a channel closed once a line holding every one of words
// has been written (words are watched from now on).
func (w *lineWatch) await(words ...string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	w.watches = append(w.watches, watch{words: words, seen: ch})
	return ch
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	text := w.partial + string(p)
	lines := strings.Split(text, "\n")
	w.partial = lines[len(lines)-1]
	for _, line := range lines[:len(lines)-1] {
		keep := w.watches[:0]
		for _, wt := range w.watches {
			if holdsAll(line, wt.words) {
				close(wt.seen)
				continue
			}
			keep = append(keep, wt)
		}
		w.watches = keep
	}
	return len(p), nil
}

func (w *lineWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

func holdsAll(line string, words []string) bool {
	for _, s := range words {
		if !strings.Contains(line, s) {
			return false
		}
	}
	return true
}

// watchedLib is scopeLib whose every line (DEBUG and up, every subsystem)
// goes to the returned lineWatch.
func watchedLib() (*Library, *lineWatch) {
	w := &lineWatch{}
	lg := flog.New(&hclog.LoggerOptions{Name: "flexlink", Level: hclog.Debug, Output: w}, flog.All)
	l := New(Options{Env: settings.Map(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_TIMEOUT": "60s"}), Logger: lg})
	return l, w
}

// abortLimit is how long ncclCommAbort, and the call it ends, may take
// (issue 30: torch's watchdog aborts a communicator whose call hangs).
const abortLimit = time.Second

// waitOr waits for ch, failing the test after limit.
func waitOr(t *testing.T, ch <-chan struct{}, limit time.Duration, what string, w *lineWatch) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(limit):
		t.Fatalf("%s: not within %v; the log:\n%s", what, limit, w)
	}
}

// TestAbortUnblocks: ncclCommAbort from another thread, while the main
// thread of the rank waits in a call that a peer never joins, returns
// within a second, and so does the waiting call, with an error: a
// collective, ncclGroupEnd (a group holding one), ncclCommInitRank (the
// other rank never joins; the handle is the one the library gives the
// caller before it joins, as NCCL sets *comm first) and ncclCommSplit (the
// other rank never splits; the parent is aborted). Each case waits for
// the log line that shows the rank is inside the call before it aborts.
func TestAbortUnblocks(t *testing.T) {
	tests := []struct {
		name string
		// start begins the blocking call on rank 0 from its own thread;
		// it returns the handle to abort (sent once known), the call's
		// result, and the log line's words that show it is blocked.
		start func(t *testing.T, l *Library, w *lineWatch) (abort <-chan uintptr, done <-chan error, inside <-chan struct{})
	}{
		{"collective", func(t *testing.T, l *Library, w *lineWatch) (<-chan uintptr, <-chan error, <-chan struct{}) {
			hs := initRanks(t, l, 2)
			inside := w.await("allreduce", "rank=0", "comm=w")
			done := make(chan error, 1)
			go func() { _, err := allreduce(l, 0, hs[0], 1); done <- err }()
			return handleNow(hs[0]), done, inside
		}},
		{"group end", func(t *testing.T, l *Library, w *lineWatch) (<-chan uintptr, <-chan error, <-chan struct{}) {
			hs := initRanks(t, l, 2)
			inside := w.await("allreduce", "rank=0", "comm=w")
			done := make(chan error, 1)
			go func() {
				x := int64(1)
				tid := tidOf(0)
				l.GroupStart(tid)
				p := unsafe.Pointer(&x)
				if err := l.Coll(tid, hs[0], Call{Kind: AllReduce, Send: p, Recv: p, Count: 1, Type: ncclInt64}); err != nil {
					done <- err
					return
				}
				done <- l.GroupEnd(tid)
			}()
			return handleNow(hs[0]), done, inside
		}},
		{"init rank", func(t *testing.T, l *Library, w *lineWatch) (<-chan uintptr, <-chan error, <-chan struct{}) {
			id, err := l.GetUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			inside := w.await("rank joined", "rank=0")
			made := make(chan uintptr, 1)
			done := make(chan error, 1)
			go func() {
				h, err := l.InitRankEarly(tidOf(0), 2, id, 0, DefaultConfig(), func(h uintptr) { made <- h })
				if err == nil {
					destroyAtEnd(t, l, []uintptr{h})
				}
				done <- err
			}()
			return made, done, inside
		}},
		{"split", func(t *testing.T, l *Library, w *lineWatch) (<-chan uintptr, <-chan error, <-chan struct{}) {
			hs := initRanks(t, l, 2)
			// The split's exchange is a bootstrap allgather: rank 0 is
			// inside once its communicator for the child exists.
			n := len(*l.handles.comms.Load())
			inside := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				h, err := l.Split(tidOf(0), hs[0], 0, 0, DefaultConfig())
				if err == nil {
					destroyAtEnd(t, l, []uintptr{h})
				}
				done <- err
			}()
			go func() {
				defer close(inside)
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
					if len(*l.handles.comms.Load()) > n {
						return
					}
					select {
					case <-done:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			return handleNow(hs[0]), done, inside
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, w := watchedLib()
			abortH, done, inside := tc.start(t, l, w)
			waitOr(t, inside, 20*time.Second, "the call starts", w)
			h := <-abortH
			select {
			case err := <-done:
				t.Fatalf("the call returned before the abort: %v", err)
			default:
			}
			begin := time.Now()
			aborted := make(chan error, 1)
			go func() { aborted <- l.Abort(h) }()
			var abortErr, callErr error
			var abortTook, callTook time.Duration
			for range 2 {
				select {
				case abortErr = <-aborted:
					abortTook = time.Since(begin)
					aborted = nil
				case callErr = <-done:
					callTook = time.Since(begin)
					done = nil
				case <-time.After(10 * time.Second):
					t.Fatalf("after 10 s: ncclCommAbort returned: %v, the call returned: %v; the log:\n%s", aborted == nil, done == nil, w)
				}
			}
			if abortErr != nil {
				t.Errorf("ncclCommAbort: %v", abortErr)
			}
			if abortTook > abortLimit {
				t.Errorf("ncclCommAbort took %v, want < %v", abortTook, abortLimit)
			}
			if callErr == nil {
				t.Error("the aborted call succeeded")
			}
			if callTook > abortLimit {
				t.Errorf("the call returned %v after the abort began, want < %v", callTook, abortLimit)
			}
			t.Logf("abort %v, call %v: %v", abortTook, callTook, callErr)
		})
	}
}

// handleNow is a channel that holds h.
func handleNow(h uintptr) <-chan uintptr {
	ch := make(chan uintptr, 1)
	ch <- h
	return ch
}
