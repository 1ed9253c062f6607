package gpu_test

import (
	"bytes"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/gpu/internal/cufake"
)

// Stream capture on the fake driver: capture modes and the unsafe-call
// rule, what a capture records and how a replay runs it, user objects.

// onThread runs f on a goroutine locked to an OS thread of its own, with
// device 0's context current, in capture mode m, and returns its error.
func onThread(f *cufake.Fake, m cu.CaptureMode, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c, err := f.PrimaryCtxRetain(0)
		if err != nil {
			done <- err
			return
		}
		defer f.PrimaryCtxRelease(0)
		if err := f.CtxSetCurrent(c); err != nil {
			done <- err
			return
		}
		if _, err := f.ThreadExchangeStreamCaptureMode(m); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// captureOnThread begins a capture in mode m on a new stream, on a thread
// in mode m, runs during there and ends the capture: endErr is the end's
// error (its graph, if any, destroyed), err that of the steps before.
func captureOnThread(f *cufake.Fake, m cu.CaptureMode, during func() error) (endErr, err error) {
	err = onThread(f, m, func() error {
		s, err := f.StreamCreate(cu.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer f.StreamDestroy(s)
		if err := f.StreamBeginCapture(s, m); err != nil {
			return err
		}
		if err := during(); err != nil {
			return err
		}
		g, err := f.StreamEndCapture(s)
		if endErr = err; err == nil {
			return f.GraphDestroy(g)
		}
		return nil
	})
	return endErr, err
}

// TestFakeCaptureModes: a potentially unsafe call fails and invalidates
// the captures its thread's mode forbids, as the CUDA documentation of
// cuStreamBeginCapture's modes says, and only those.
func TestFakeCaptureModes(t *testing.T) {
	_, f := openFake(t, gpufake.Config{})
	for _, tc := range []struct {
		name        string
		capture     cu.CaptureMode
		sameThread  bool
		callerMode  cu.CaptureMode
		wantRefused bool
	}{
		{"global-other-global", cu.CaptureModeGlobal, false, cu.CaptureModeGlobal, true},
		{"global-other-relaxed", cu.CaptureModeGlobal, false, cu.CaptureModeRelaxed, false},
		{"global-other-threadlocal", cu.CaptureModeGlobal, false, cu.CaptureModeThreadLocal, false},
		{"global-same-global", cu.CaptureModeGlobal, true, cu.CaptureModeGlobal, true},
		{"global-same-relaxed", cu.CaptureModeGlobal, true, cu.CaptureModeRelaxed, false},
		{"threadlocal-other-global", cu.CaptureModeThreadLocal, false, cu.CaptureModeGlobal, false},
		{"threadlocal-same-threadlocal", cu.CaptureModeThreadLocal, true, cu.CaptureModeThreadLocal, true},
		{"relaxed-same-global", cu.CaptureModeRelaxed, true, cu.CaptureModeGlobal, false},
		{"relaxed-other-global", cu.CaptureModeRelaxed, false, cu.CaptureModeGlobal, false},
	} {
		for _, unsafeCall := range []string{"cuMemAlloc", "cuEventQuery", "cuStreamSynchronize(other)"} {
			t.Run(tc.name+"/"+unsafeCall, func(t *testing.T) {
				call := func() error {
					switch unsafeCall {
					case "cuMemAlloc":
						p, err := f.MemAlloc(256)
						if err == nil {
							f.MemFree(p)
						}
						return err
					case "cuEventQuery":
						e, err := f.EventCreate(cu.EventDisableTiming)
						if err != nil {
							return err
						}
						defer f.EventDestroy(e)
						_, err = f.EventQuery(e)
						return err
					}
					o, err := f.StreamCreate(cu.StreamNonBlocking)
					if err != nil {
						return err
					}
					defer f.StreamDestroy(o)
					return f.StreamSynchronize(o)
				}
				var callErr error
				endErr, err := captureOnThread(f, tc.capture, func() error {
					if tc.sameThread {
						f.ThreadExchangeStreamCaptureMode(tc.callerMode)
						callErr = call()
					} else {
						callErr = onThread(f, tc.callerMode, call)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if tc.wantRefused {
					if !cu.Is(callErr, cu.ErrorCaptureUnsupported) || !cu.Is(endErr, cu.ErrorCaptureInvalidated) {
						t.Errorf("call: %v, end capture: %v; want CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED then _INVALIDATED", callErr, endErr)
					}
				} else if callErr != nil || endErr != nil {
					t.Errorf("call: %v, end capture: %v; want both to succeed", callErr, endErr)
				}
			})
		}
	}
}

// TestFakeCaptureLibraryRelaxed: the library's own calls (package gpu)
// never invalidate a global capture in progress on another thread.
func TestFakeCaptureLibraryRelaxed(t *testing.T) {
	dv, f := fakeDevice(t, gpufake.Config{})
	other, ev := mustStream(t, dv), mustEvent(t, dv, false)
	endErr, err := captureOnThread(f, cu.CaptureModeGlobal, func() error {
		// On other threads (Go moves goroutines; gpu switches each call's
		// thread to relaxed mode).
		return onThread(f, cu.CaptureModeGlobal, func() error {
			b, err := dv.Alloc(1 << 10)
			if err != nil {
				return err
			}
			if err := other.Record(ev); err != nil {
				return err
			}
			if _, err := ev.Done(); err != nil {
				return err
			}
			if err := other.Synchronize(); err != nil {
				return err
			}
			return b.Free()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if endErr != nil {
		t.Fatalf("the library's calls invalidated a global capture: %v", endErr)
	}
}

// TestFakeGraph: a capture records copies, memsets, kernel launches (with
// their arguments as they were), host functions and external event
// records; each replay runs them again on the memory as it is then; events
// recorded inside a capture cannot be used outside it; a graph's user
// objects are destroyed with the graph and its instantiations.
func TestFakeGraph(t *testing.T) {
	dv, f := fakeDevice(t, gpufake.Config{})
	s, cs := mustStream(t, dv), mustStream(t, dv)
	const n = 4096
	in, mid, out := mustAlloc(t, dv, n), mustAlloc(t, dv, n), mustAlloc(t, dv, n)
	ext, inner := mustEvent(t, dv, false), mustEvent(t, dv, false)
	var hostRuns, destroyed atomic.Int32

	if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
		t.Fatal(err)
	}
	if ci, err := cs.Capture(); err != nil || !ci.Active || ci.ID == 0 {
		t.Fatalf("capture info %+v, %v; want active", ci, err)
	}
	steps := []error{
		cs.Memset(out, 0x55),
		cs.Copy(mid, in), // a kernel
		cs.CopyDtoD(out.Sub(0, n/2), mid.Sub(0, n/2)),
		cs.LaunchHostFunc(func() { hostRuns.Add(1) }),
		cs.RecordExternal(ext),
		cs.Record(inner),
		cs.HoldForGraph(func() { destroyed.Add(1) }),
	}
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}
	if hostRuns.Load() != 0 {
		t.Fatal("a host function ran at capture")
	}
	// Inner belongs to the capture: waiting on it from a stream outside
	// makes that stream join the capture, which is not what we want here;
	// querying it fails.
	if _, err := inner.Done(); !cu.Is(err, cu.ErrorCapturedEvent) {
		t.Fatalf("query of an event recorded in the capture: %v, want CUDA_ERROR_CAPTURED_EVENT", err)
	}
	g, err := cs.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	x, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if destroyed.Load() != 0 {
		t.Fatal("the user object was destroyed with the graph while an instantiation holds it")
	}
	for k := 1; k <= 3; k++ {
		src := bytes.Repeat([]byte{byte(k)}, n)
		if err := s.CopyHtoD(in, src); err != nil {
			t.Fatal(err)
		}
		if err := x.Launch(s); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := s.CopyDtoH(got, out); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		want := append(bytes.Repeat([]byte{byte(k)}, n/2), bytes.Repeat([]byte{0x55}, n/2)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("replay %d: output differs from the captured work on the new input", k)
		}
		if hostRuns.Load() != int32(k) {
			t.Fatalf("replay %d: host function ran %d times", k, hostRuns.Load())
		}
		if done, err := ext.Done(); err != nil || !done {
			t.Fatalf("replay %d: the external record node left the event %v, %v", k, done, err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if destroyed.Load() != 1 {
		t.Fatalf("user object destroyed %d times after the graph and its instantiation went, want 1", destroyed.Load())
	}
	if graphs, execs, users := f.Graphs(); graphs+execs+users != 0 {
		t.Fatalf("left: %d graphs, %d instantiations, %d user objects", graphs, execs, users)
	}
}

// TestFakeCaptureEvents: a capture may wait on an event recorded outside
// it only as an external wait (a plain one invalidates it, as CUDA's
// isolation rule); a stream that waits on an event of the capture joins it
// (a fork), and its work replays with the graph.
func TestFakeCaptureEvents(t *testing.T) {
	dv, _ := fakeDevice(t, gpufake.Config{})
	s, cs, side := mustStream(t, dv), mustStream(t, dv), mustStream(t, dv)
	eager, fork := mustEvent(t, dv, false), mustEvent(t, dv, false)
	if err := s.Record(eager); err != nil {
		t.Fatal(err)
	}

	t.Run("plain-wait-outside", func(t *testing.T) {
		if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
			t.Fatal(err)
		}
		if err := cs.Wait(eager); !cu.Is(err, cu.ErrorCaptureIsolation) {
			t.Errorf("plain wait on an event recorded outside: %v, want CUDA_ERROR_STREAM_CAPTURE_ISOLATION", err)
		}
		if g, err := cs.EndCapture(); !cu.Is(err, cu.ErrorCaptureInvalidated) {
			t.Errorf("end capture: %v, want CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", err)
			if g != nil {
				g.Close()
			}
		}
	})

	t.Run("external-wait-and-fork", func(t *testing.T) {
		buf := mustAlloc(t, dv, 64)
		if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
			t.Fatal(err)
		}
		if err := cs.WaitExternal(eager); err != nil {
			t.Fatal(err)
		}
		if err := cs.Record(fork); err != nil {
			t.Fatal(err)
		}
		if err := side.Wait(fork); err != nil { // side joins the capture
			t.Fatal(err)
		}
		if ci, err := side.Capture(); err != nil || !ci.Active {
			t.Fatalf("the forked stream: %+v, %v; want it in the capture", ci, err)
		}
		if err := side.Memset(buf, 7); err != nil {
			t.Fatal(err)
		}
		g, err := cs.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if ci, err := side.Capture(); err != nil || ci.Active {
			t.Fatalf("the forked stream after the capture ended: %+v, %v", ci, err)
		}
		got := make([]byte, 64)
		if err := s.CopyDtoH(got, buf); err != nil || got[0] == 7 {
			t.Fatalf("the forked stream's memset ran at capture (%v)", err)
		}
		x, err := g.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		if err := x.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := s.CopyDtoH(got, buf); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{7}, 64)) {
			t.Fatalf("the replay did not run the forked stream's memset (%v)", err)
		}
	})
}

// TestFakeRecordBranch: a branch record needs an active capture, and a
// dependency from the same graph; the graph it ends replays.
func TestFakeRecordBranch(t *testing.T) {
	dv, _ := fakeDevice(t, gpufake.Config{})
	s, cs := mustStream(t, dv), mustStream(t, dv)
	ev := mustEvent(t, dv, false)
	if _, err := cs.RecordBranch(ev, gpu.GraphNode{}); !cu.Is(err, cu.ErrorIllegalState) {
		t.Fatalf("a branch record outside a capture: %v, want CUDA_ERROR_ILLEGAL_STATE", err)
	}
	capture := func() (first, second gpu.GraphNode, g *gpu.Graph) {
		t.Helper()
		buf := mustAlloc(t, dv, 64)
		if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
			t.Fatal(err)
		}
		if err := cs.Memset(buf, 1); err != nil {
			t.Fatal(err)
		}
		first, err := cs.RecordBranch(ev, gpu.GraphNode{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Memset(buf, 2); err != nil {
			t.Fatal(err)
		}
		if second, err = cs.RecordBranch(ev, first); err != nil {
			t.Fatal(err)
		}
		if g, err = cs.EndCapture(); err != nil {
			t.Fatal(err)
		}
		return first, second, g
	}
	_, second, g1 := capture()
	defer g1.Close()
	if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RecordBranch(ev, second); !cu.Is(err, cu.ErrorInvalidValue) {
		t.Errorf("a branch record after another graph's node: %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
	if g, err := cs.EndCapture(); err == nil {
		g.Close()
	}
	x, err := g1.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	for range 3 {
		if err := x.Launch(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Wait(ev); err != nil {
		t.Fatalf("an eager wait on the replayed branch record: %v", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestFakeStreamValues: a stream waits for a word another stream (or a
// replayed graph) writes, with each condition; captured writes and waits
// are nodes that act at every replay.
func TestFakeStreamValues(t *testing.T) {
	dv, _ := fakeDevice(t, gpufake.Config{})
	a, b := mustStream(t, dv), mustStream(t, dv)
	flag := mustAlloc(t, dv, 64)
	if err := a.Memset(flag, 0); err != nil {
		t.Fatal(err)
	}
	w := flag.Ptr()
	for _, tc := range []struct {
		cond   gpu.WaitCond
		write  uint32
		waitOn uint32
	}{{gpu.WaitGEQ, 5, 4}, {gpu.WaitEQ, 9, 9}, {gpu.WaitAND, 6, 2}, {gpu.WaitNOR, 0, 1}} {
		// The writer runs on another goroutine: the waiting stream (this
		// goroutine, on the fake) blocks until it has written.
		done := make(chan error, 1)
		go func() { done <- b.WriteValue32(w, tc.write) }()
		if err := a.WaitValue32(w, tc.waitOn, tc.cond); err != nil {
			t.Fatalf("cond %d: %v", tc.cond, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Captured: a graph that waits for the word to reach k, then writes
	// k+100 next to it; the host side bumps the word through a copy.
	cs := mustStream(t, dv)
	if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(cs.WaitValue32(w, 1000, gpu.WaitGEQ), cs.WriteValue32(w+4, 77)); err != nil {
		t.Fatal(err)
	}
	g, err := cs.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	x, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	for k := uint32(1); k <= 2; k++ {
		if err := a.Memset(flag.Sub(0, 8), 0); err != nil { // the word and the node's target
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- x.Launch(a) }()
		if err := b.WriteValue32(w, 1000*k); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("replay %d: %v", k, err)
		}
		got := make([]byte, 4)
		if err := b.CopyDtoH(got, flag.Sub(4, 4)); err != nil || got[0] != 77 {
			t.Fatalf("replay %d: the write node left %v (%v)", k, got, err)
		}
	}
}
