package capi

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestTwoRankCallsNoLibraryAllocs: on two ranks of two fake GPUs, each
// rank calling from a thread of its own as two processes do, a warm
// ncclAllReduce of 8 bytes and a warm grouped ncclSend/ncclRecv make no
// heap allocation in the library (issue 29's fast path). The fake driver's
// kernels allocate (timers, goroutines): the heap profile, at every
// allocation, attributes each to the innermost frame that is neither the
// Go runtime's nor the fake driver's, and only the library's count. With
// a default call deadline (FLEXLINK_TIMEOUT) too: the flag kernels carry
// it, and the call's context makes no timer unless something waits.
func TestTwoRankCallsNoLibraryAllocs(t *testing.T) {
	for _, c := range callDeadlines {
		t.Run(c.name, func(t *testing.T) { testTwoRankCallsNoLibraryAllocs(t, c.env) })
	}
}

func testTwoRankCallsNoLibraryAllocs(t *testing.T, env []string) {
	f, mem := newIDFixture(t, 2, gpufake.Config{}, env...)
	type calls struct{ ar, send, recv Call }
	var cs [2]calls
	for r := range cs {
		send, recv := memAlloc(t, f.dvs[r], mem, 8, r), memAlloc(t, f.dvs[r], mem, 8, r)
		s := f.ss[r].Handle()
		cs[r] = calls{
			ar:   Call{Kind: AllReduce, Send: devPtr(send), Recv: devPtr(recv), Count: 2, Type: ncclFloat32, Stream: s},
			send: Call{Kind: Send, Send: devPtr(send), Count: 2, Type: ncclFloat32, Root: 1 - r, Stream: s},
			recv: Call{Kind: Recv, Recv: devPtr(recv), Count: 2, Type: ncclFloat32, Root: 1 - r, Stream: s},
		}
	}
	run := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tid := 10 + r
				for i := 0; i < n && errs[r] == nil; i++ {
					if errs[r] = f.l.Coll(tid, f.hs[r], cs[r].ar); errs[r] != nil {
						break
					}
					errs[r] = groupOf(f.l, tid, f.hs[r], []Call{cs[r].send, cs[r].recv})
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	run(20) // warm: buffers located, streams wrapped, kernels loaded
	const n = 500
	sites := libraryAllocs(func() { run(n) })
	total, worst := 0, 0
	var lines []string
	for site, k := range sites {
		total += k
		worst = max(worst, k)
		lines = append(lines, fmt.Sprintf("%6d %s", k, site))
	}
	sort.Strings(lines)
	// The profile's collections empty the library's sync.Pools, which
	// refill at the start (no collection runs inside: libraryAllocs), and
	// the library's own goroutines (watchers, tickers) allocate with the
	// time a run takes: a few one-off allocations, none per call. An
	// allocation per call at one site makes at least n (one rank's calls
	// of one kind); the total backstops many small ones.
	t.Logf("%d library allocations in %d calls and groups, at most %d at one site", total, 4*n, worst)
	if worst >= n/2 || total >= n {
		t.Errorf("%d library allocations in %d calls (2 ranks × %d allreduces and %d send/recv groups), %d at one site; want none per call; by innermost library frame:\n%s",
			total, 4*n, n, n, worst, strings.Join(lines, "\n"))
	}
}

// libraryAllocs runs f with every allocation profiled, and no garbage
// collection, and counts, by innermost library frame, the allocations made
// under f outside the Go runtime, the standard library's time and sync
// packages, the fake driver and the test itself.
func libraryAllocs(f func()) map[string]int {
	snap := func() map[[32]uintptr]int64 {
		runtime.GC()
		runtime.GC() // the profile is published a cycle late
		var rs []runtime.MemProfileRecord
		n, _ := runtime.MemProfile(nil, true)
		for {
			rs = make([]runtime.MemProfileRecord, n+64)
			var ok bool
			if n, ok = runtime.MemProfile(rs, true); ok {
				rs = rs[:n]
				break
			}
		}
		m := make(map[[32]uintptr]int64, len(rs))
		for _, r := range rs {
			m[r.Stack0] += r.AllocObjects
		}
		return m
	}
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	before := snap()
	gc := debug.SetGCPercent(-1)
	f()
	debug.SetGCPercent(gc)
	after := snap()
	out := map[string]int{}
	for stk, k := range after {
		k -= before[stk]
		if k <= 0 {
			continue
		}
		if site := librarySite(stk); site != "" {
			out[site] += int(k)
		}
	}
	return out
}

// librarySite is the innermost frame of stk that belongs to the library
// ("" when the allocation is the runtime's, the fake driver's or the
// test's own).
func librarySite(stk [32]uintptr) string {
	var pcs []uintptr
	for _, pc := range stk {
		if pc == 0 {
			break
		}
		pcs = append(pcs, pc)
	}
	fr := runtime.CallersFrames(pcs)
	for {
		f, more := fr.Next()
		switch fn := f.Function; {
		case strings.HasPrefix(fn, "runtime."), strings.HasPrefix(fn, "time."), strings.HasPrefix(fn, "sync."),
			strings.HasPrefix(fn, "internal/"), strings.HasPrefix(fn, "sort."):
		case strings.Contains(fn, "/gpu/gpufake."), strings.Contains(fn, "/gpu/internal/cufake."),
			strings.HasSuffix(f.File, "_test.go"), strings.HasPrefix(fn, "testing."):
			return ""
		case strings.HasPrefix(fn, "github.com/flexlink/flexlink/"):
			return fmt.Sprintf("%s (%s:%d)", strings.TrimPrefix(fn, "github.com/flexlink/flexlink/"), f.File[strings.LastIndex(f.File, "/")+1:], f.Line)
		default:
			return fn // another module's allocation, made for the library
		}
		if !more {
			return ""
		}
	}
}
