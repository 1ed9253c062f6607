package capi

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/comm"
)

// enqFixture is 3 ranks on the fake driver's GPUs under a fake flexrun
// (newFakeFlexrun: this process is its rank 1), with
// FLEXLINK_STALL_REPORT=1s, and each rank's buffer of each call.
type enqFixture struct {
	*devFixture
	fr    *fakeFlexrun
	bufs  [3]map[int]*gpu.Buffer // by rank, then call
	count int
	gpus  [3]chan *gpu.GraphExec // each rank's "GPU" (enqueue)
}

// newEnqFixture makes an enqFixture of count float32 elements per call;
// env adds settings (name, value, ...).
func newEnqFixture(t *testing.T, count int, env ...string) *enqFixture {
	t.Helper()
	return newEnqFixtureStall(t, count, "1s", env...)
}

// newEnqFixtureStall is newEnqFixture with FLEXLINK_STALL_REPORT=stall
// ("": its default).
func newEnqFixtureStall(t *testing.T, count int, stall string, env ...string) *enqFixture {
	t.Helper()
	fr := newFakeFlexrun(t, true)
	vars := []string{"FLEXLINK_TIMEOUT", "60s"}
	if stall != "" {
		vars = append(vars, "FLEXLINK_STALL_REPORT", stall)
	}
	for k, v := range fr.vars {
		vars = append(vars, k, v)
	}
	f, _ := newIDFixture(t, 3, gpufake.Config{}, append(vars, env...)...)
	e := &enqFixture{devFixture: f, fr: fr, count: count}
	for r := range 3 {
		e.bufs[r] = map[int]*gpu.Buffer{}
	}
	return e
}

// enqVal is rank r's element i in call k (numbered from 1).
func enqVal(r, i, k int) float32 { return float32((r+1)*k) + float32(i%13) }

// input writes rank r's input of call k into a buffer of its own.
func (e *enqFixture) input(r, k int) {
	v := make([]float32, e.count)
	for i := range v {
		v[i] = enqVal(r, i, k)
	}
	e.bufs[r][k] = e.alloc(r, 4*e.count, false)
	e.upload(r, e.bufs[r][k], float32s(v))
}

// call is rank r's call k, an in-place allreduce.
func (e *enqFixture) call(r, k int) Call {
	b := e.bufs[r][k]
	return Call{Kind: AllReduce, Send: devPtr(b), Recv: devPtr(b), Count: uint64(e.count), Type: ncclFloat32, Stream: e.ss[r].Handle()}
}

// check downloads rank r's buffer and compares it with the sum of every
// rank's input of call k.
func (e *enqFixture) check(r, k int) {
	e.t.Helper()
	for i, g := range fromFloat32s(e.download(r, e.bufs[r][k], 4*e.count)) {
		want := 0.0
		for q := range 3 {
			want += float64(enqVal(q, i, k))
		}
		if math.Abs(float64(g)-want) > 1e-3*math.Abs(want) {
			e.t.Fatalf("rank %d: call %d [%d] = %v, want %v", r, k, i, g, want)
		}
	}
}

// rounds makes calls from..to on every rank (one group each) and checks
// each result.
func (e *enqFixture) rounds(from, to int) {
	e.t.Helper()
	for k := from; k <= to; k++ {
		for r := range 3 {
			e.input(r, k)
		}
		if err := e.group(func(r int) Call { return e.call(r, k) }); err != nil {
			e.t.Fatalf("call %d: %v", k, err)
		}
		for r := range 3 {
			e.check(r, k)
		}
	}
}

// enqueue captures rank r's allreduce (its input of call k) on a stream
// of its own and launches the graph on rank r's stream from a goroutine
// of its own, the "GPU": the call returns at once, as an eager call that
// the flag kernels serve returns on a real GPU, while its kernel waits on
// the "GPU" for the peers' (the fake driver runs a stream's work on the
// thread that enqueues it: an eager call on it would block its caller,
// whom watchStalls' caller's-thread timing sees). The replay's end
// arrives on done.
func (e *enqFixture) enqueue(r, k int, done chan<- error) {
	e.t.Helper()
	x := e.capture(r, k)
	if e.gpus[r] == nil {
		// Rank r's "GPU": its graphs run in the order enqueued.
		q := make(chan *gpu.GraphExec, 8)
		e.gpus[r] = q
		go func() {
			for x := range q {
				err := x.Launch(e.ss[r])
				if err == nil {
					err = e.ss[r].Synchronize()
				}
				done <- err
			}
		}()
		e.t.Cleanup(func() { close(q) })
	}
	e.gpus[r] <- x
}

// capture captures rank r's call k (its input written first) and returns
// the graph, instantiated.
func (e *enqFixture) capture(r, k int) *gpu.GraphExec {
	e.t.Helper()
	e.input(r, k)
	cs := newCapture(e.t, e.dvs[r])
	defer cs.Close()
	call := e.call(r, k)
	call.Stream = cs.Handle()
	cerr := e.l.Coll(fixtureTid, e.hs[r], call)
	g, err := cs.EndCapture()
	if cerr != nil || err != nil {
		e.t.Fatalf("rank %d: capture call %d: %v %v", r, k, cerr, err)
	}
	x, err := g.Instantiate()
	g.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	return x
}

// TestStallEnqueued: collectives on device buffers that return before
// their work completes (the flag kernels: on a real GPU every small one,
// every size with FLEXLINK_GPU_ENQUEUE=async or under MPS) are reported
// when a member withholds one, though no host thread waits in them; with
// FLEXLINK_STALL_REPORT=1s, on 3 ranks.
//   - Ranks 0 and 2 enqueue AllReduce #3 (and, "two behind", #4), which
//     rank 1 has not called: each reports it to flexrun (a timeout in
//     AllReduce #3 naming rank 1, its rank in flexrun's job among the
//     members behind) within the setting and 2 s of its last call's
//     return, and its last error says so; when rank 1 makes the calls
//     late, each withdraws its report (comm.EndResumed for AllReduce #3),
//     every result is right, and nothing more is reported.
//   - A member that makes the reported call but not the next: the
//     report is withdrawn, and the next call reported once it stays
//     behind for the setting.
//   - ncclCommAbort (torch's watchdog, before the setting's default)
//     asks and reports the same, within a second.
//   - When every rank makes every call, each rank asks once it has been
//     idle for the setting, finds nobody behind, and reports nothing:
//     flexrun's store hears nothing at all (no join).
func TestStallEnqueued(t *testing.T) {
	for _, withheld := range []int{1, 2} {
		name := map[int]string{1: "one behind", 2: "two behind"}[withheld]
		t.Run(name, func(t *testing.T) {
			e := newEnqFixture(t, 256)
			e.rounds(1, 2)
			done := make(chan error, 3*withheld)
			var returned time.Time
			for k := 3; k < 3+withheld; k++ {
				for _, r := range []int{0, 2} {
					e.enqueue(r, k, done)
				}
				returned = time.Now()
			}
			for range 2 {
				end := e.fr.nextEnd(t, "the stall reports")
				took := time.Since(returned)
				if end.Kind != "timeout" || end.InCall != "AllReduce #3" || !strings.Contains(end.Text, "rank 1 has not called AllReduce #3 (its last collective on this communicator: #2)") {
					t.Fatalf("put %+v, want a timeout in AllReduce #3 naming rank 1", end)
				}
				if !slices.Equal(end.Behind, []int{1}) { // every member is flexrun's rank 1 here
					t.Errorf("behind %v, want [1]", end.Behind)
				}
				if limit := time.Second + 2*time.Second; took > limit {
					t.Errorf("reported %v after the last call returned, want within %v", took.Round(time.Millisecond), limit)
				}
				t.Logf("reported %v after the last call returned: %s", took.Round(time.Millisecond), end.Text)
			}
			select {
			case err := <-done:
				t.Fatalf("a withheld call's work ended before rank 1 called it: %v", err)
			default:
			}
			for _, r := range []int{0, 2} {
				c, err := e.l.handles.comm(e.hs[r], "test")
				if err != nil {
					t.Fatal(err)
				}
				if last := c.lastErr(); !strings.Contains(last, "rank 1 has not called AllReduce #3") {
					t.Errorf("rank %d: last error %q does not name rank 1", r, last)
				}
			}
			late := time.Now()
			for k := 3; k < 3+withheld; k++ {
				e.enqueue(1, k, done)
			}
			for range 3 * withheld {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("the calls did not complete within 20 s of rank 1's")
				}
			}
			for range 2 {
				end := e.fr.nextEnd(t, "the withdrawals")
				if end.Kind != comm.EndResumed || end.InCall != "AllReduce #3" || !strings.HasPrefix(end.Comm, "nccl@") {
					t.Fatalf("put %+v, want %q for AllReduce #3", end, comm.EndResumed)
				}
				t.Logf("withdrawn %v after rank 1's calls", time.Since(late).Round(time.Millisecond))
			}
			for r := range 3 {
				for k := 3; k < 3+withheld; k++ {
					e.check(r, k)
				}
			}
			quiet(t, e.fr, 2*time.Second+reportWait, false, "after the withdrawals")
		})
	}
	// Rank 1 makes AllReduce #3 after the reports, but not #4: each rank
	// withdraws its report of #3, and once rank 1 has stayed at #4 for
	// the setting, reports #4; when rank 1 makes #4, each withdraws that.
	t.Run("behind, then behind again", func(t *testing.T) {
		e := newEnqFixture(t, 256)
		e.rounds(1, 2)
		done := make(chan error, 6)
		for k := 3; k <= 4; k++ {
			for _, r := range []int{0, 2} {
				e.enqueue(r, k, done)
			}
		}
		for range 2 {
			if end := e.fr.nextEnd(t, "the stall reports"); end.Kind != "timeout" || end.InCall != "AllReduce #3" {
				t.Fatalf("put %+v, want a timeout in AllReduce #3", end)
			}
		}
		moved := time.Now()
		e.enqueue(1, 3, done)
		withdrawn := map[string]bool{}
		for range 4 {
			end := e.fr.nextEnd(t, "the withdrawals of #3 and the reports of #4")
			who, _, _ := strings.Cut(end.Text, ":")
			switch {
			case end.Kind == comm.EndResumed && end.InCall == "AllReduce #3":
				withdrawn[who] = true
			case end.Kind == "timeout" && end.InCall == "AllReduce #4" && strings.Contains(end.Text, "rank 1 has not called AllReduce #4 (its last collective on this communicator: #3)"):
				if !withdrawn[who] {
					t.Errorf("%s reported #4 before it withdrew #3", who)
				}
				if took := time.Since(moved); took < time.Second {
					t.Errorf("%s reported #4 %v after rank 1 made #3, want its place held for the setting (1 s) first", who, took)
				}
			default:
				t.Fatalf("put %+v, want the withdrawal of AllReduce #3 or a timeout in AllReduce #4 naming rank 1", end)
			}
		}
		for range 3 { // #3 completes on every rank
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		e.enqueue(1, 4, done)
		for range 3 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if end := e.fr.nextEnd(t, "the withdrawals of #4"); end.Kind != comm.EndResumed || end.InCall != "AllReduce #4" {
				t.Fatalf("put %+v, want %q for AllReduce #4", end, comm.EndResumed)
			}
		}
		for r := range 3 {
			e.check(r, 3)
			e.check(r, 4)
		}
	})
	// torch's watchdog aborts at a timeout shorter than
	// FLEXLINK_STALL_REPORT (here its default, 5 s): ncclCommAbort on rank
	// 0 asks the members and reports rank 1, within a second.
	t.Run("aborted before the setting", func(t *testing.T) {
		e := newEnqFixtureStall(t, 256, "")
		e.rounds(1, 2)
		done := make(chan error, 3)
		for _, r := range []int{0, 2} {
			e.enqueue(r, 3, done)
		}
		start := time.Now()
		if err := e.l.Abort(e.hs[0]); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if took > time.Second {
			t.Errorf("ncclCommAbort took %v, want less than 1 s", took.Round(time.Millisecond))
		}
		end := e.fr.nextEnd(t, "the abort's report")
		if end.Kind != "timeout" || end.InCall != "AllReduce #3" || !strings.Contains(end.Text, "rank 0 of 3: AllReduce #3 did not complete: rank 1 has not called AllReduce #3") {
			t.Fatalf("put %+v, want rank 0's timeout in AllReduce #3 naming rank 1", end)
		}
		if time.Since(start) > stallReport {
			t.Errorf("reported %v after the abort began: not before FLEXLINK_STALL_REPORT", time.Since(start))
		}
		t.Logf("ncclCommAbort took %v; reported: %s", took.Round(time.Millisecond), end.Text)
	})
	t.Run("nobody behind", func(t *testing.T) {
		e := newEnqFixture(t, 256)
		e.rounds(1, 3)
		deadline := time.Now().Add(time.Second + 5*time.Second)
		for r := range 3 {
			c := e.l.handles.get(e.hs[r])
			for c.prog.caught.Load() < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("rank %d did not find every member past call 3 (found %d)", r, c.prog.caught.Load())
				}
				<-time.After(20 * time.Millisecond)
			}
		}
		quiet(t, e.fr, time.Second+reportWait, true, "with nobody behind")
	})
}

// quiet fails the test if flexrun's store hears a put within d, or with
// all, anything (a reporter's join, goodbye).
func quiet(t *testing.T, f *fakeFlexrun, d time.Duration, all bool, what string) {
	t.Helper()
	limit := time.After(d)
	for {
		select {
		case ev := <-f.events:
			if !all && ev.Kind != bootstrap.EventPut {
				continue
			}
			msg := fmt.Sprintf("%v %q", ev.Kind, ev.Key)
			if ev.Kind == bootstrap.EventPut {
				if end, ok := comm.DecodeEnd(ev.Key, ev.Value); ok {
					msg = fmt.Sprintf("put %+v", end)
				}
			}
			t.Errorf("%s: flexrun's store heard %s, want nothing", what, msg)
		case <-limit:
			return
		}
	}
}

// TestEndedByPeerReported: every rank of 3 enqueues AllReduce #3, but
// rank 1's work never runs (its process is on its way out) and it calls
// ncclCommAbort, as torch does to a process's communicators as it exits,
// while the work of ranks 0 and 2 waits on the GPU for it. Nobody is
// behind in the count of calls, so no member is named as one that has
// not called it; but when each of them finds the communicator ended
// (ncclCommGetAsyncError, torch's watchdog poll), it tells flexrun whose
// end it met (an "aborted" end in AllReduce #3 whose words name rank 1,
// which flexrun's judge reads as the member that left: "rank 1 ended
// communicator ... while ranks 0, 2 were in AllReduce #3"). Rank 1, whose
// own abort it is, reports nothing; and a rank that aborts its own
// communicator reports no "aborted" end either (TestStallEnqueued
// "aborted before the setting" reports the member behind instead).
func TestEndedByPeerReported(t *testing.T) {
	e := newEnqFixtureStall(t, 256, "")
	e.rounds(1, 2)
	done := make(chan error, 2)
	for r := range 3 {
		if r == 1 {
			e.capture(1, 3) // captured, never launched
			continue
		}
		e.enqueue(r, 3, done)
	}
	if err := e.l.Abort(e.hs[1]); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 2} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, err := e.l.AsyncError(e.hs[r])
			if err != nil {
				t.Fatal(err)
			}
			if res != Success && res != InProgress {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d: no asynchronous error 10 s after rank 1's abort", r)
			}
			<-time.After(10 * time.Millisecond) // the watchdog's poll
		}
	}
	seen := map[string]bool{}
	for range 2 {
		end := e.fr.nextEnd(t, "the reports of the end")
		if end.Kind != "aborted" || end.InCall != "AllReduce #3" || !strings.Contains(end.Text, "ended by rank 1 of 3") {
			t.Fatalf("put %+v, want an aborted end in AllReduce #3 naming rank 1", end)
		}
		who, _, _ := strings.Cut(end.Text, ":")
		seen[who] = true
		t.Logf("reported: %s", end.Text)
	}
	if len(seen) != 2 {
		t.Errorf("reports from %v, want one from each of ranks 0 and 2", seen)
	}
	quiet(t, e.fr, time.Second, false, "after the reports")
}
