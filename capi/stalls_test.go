package capi

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/settings"
)

// TestEnqueueAndReturn runs, on 2-4 ranks of the fake driver, a sequence
// that mixes device collectives past the eager flag limit
// (FLEXLINK_GPU_FLAG_COLL_BYTES=4096: with FLEXLINK_GPU_ENQUEUE=async the
// flag kernels take them whole, with sync the handshake path does; which
// path each call takes is collectives/direct's TestGPUFakeEnqueueAnySize),
// send/recv groups, and calls on host buffers. Every result is checked
// against a float64 reference.
func TestEnqueueAndReturn(t *testing.T) {
	for _, tc := range []struct {
		n       int
		enqueue string
	}{{2, "async"}, {3, "async"}, {4, "async"}, {3, "sync"}} {
		t.Run(fmt.Sprintf("%dranks/%s", tc.n, tc.enqueue), func(t *testing.T) {
			f := newDevFixture(t, tc.n, gpufake.Config{}, "FLEXLINK_GPU_FLAG_COLL_BYTES", "4096", "FLEXLINK_GPU_ENQUEUE", tc.enqueue)
			n, count := tc.n, 1000
			send := make([]*gpu.Buffer, n)
			recv := make([]*gpu.Buffer, n)
			for r := range n {
				send[r], recv[r] = f.alloc(r, 4*count*n, false), f.alloc(r, 4*count*n, false)
			}
			val := func(r, i, round int) float32 { return float32((r+1)*(round+2)) + float32(i%97)/8 }
			for round := range 3 {
				for r := range n {
					v := make([]float32, count*n)
					for i := range v {
						v[i] = val(r, i, round)
					}
					f.upload(r, send[r], float32s(v))
				}
				// AllReduce (device).
				if err := f.group(func(r int) Call {
					return Call{Kind: AllReduce, Send: devPtr(send[r]), Recv: devPtr(recv[r]), Count: uint64(count), Type: ncclFloat32, Stream: f.ss[r].Handle()}
				}); err != nil {
					t.Fatalf("round %d allreduce: %v", round, err)
				}
				for r := range n {
					got := fromFloat32s(f.download(r, recv[r], 4*count))
					for i, g := range got {
						want := 0.0
						for q := range n {
							want += float64(val(q, i, round))
						}
						if math.Abs(float64(g)-want) > 1e-3*math.Abs(want) {
							t.Fatalf("round %d allreduce rank %d [%d] = %v, want %v", round, r, i, g, want)
						}
					}
				}
				// AllReduce on host buffers, between the device calls.
				host := make([][]float32, n)
				var wg sync.WaitGroup
				errs := make([]error, n)
				for r := range n {
					host[r] = []float32{float32(r + round)}
					wg.Add(1)
					go func() {
						defer wg.Done()
						p := unsafe.Pointer(&host[r][0])
						errs[r] = f.l.Coll(100+r, f.hs[r], Call{Kind: AllReduce, Send: p, Recv: p, Count: 1, Type: ncclFloat32})
					}()
				}
				wg.Wait()
				for r := range n {
					if errs[r] != nil {
						t.Fatalf("round %d host allreduce rank %d: %v", round, r, errs[r])
					}
					want := float32(n*(n-1)/2 + n*round)
					if host[r][0] != want {
						t.Fatalf("round %d host allreduce rank %d = %v, want %v", round, r, host[r][0], want)
					}
				}
				// AllGather and Broadcast (device), then a ring of sends.
				if err := f.group(func(r int) Call {
					return Call{Kind: AllGather, Send: devPtr(send[r]), Recv: devPtr(recv[r]), Count: uint64(count), Type: ncclFloat32, Stream: f.ss[r].Handle()}
				}); err != nil {
					t.Fatalf("round %d allgather: %v", round, err)
				}
				for r := range n {
					got := fromFloat32s(f.download(r, recv[r], 4*count*n))
					for i, g := range got {
						if want := val(i/count, i%count, round); g != want {
							t.Fatalf("round %d allgather rank %d [%d] = %v, want %v", round, r, i, g, want)
						}
					}
				}
				root := round % n
				if err := f.group(func(r int) Call {
					return Call{Kind: Broadcast, Send: devPtr(send[r]), Recv: devPtr(recv[r]), Count: uint64(count), Type: ncclFloat32, Root: root, Stream: f.ss[r].Handle()}
				}); err != nil {
					t.Fatalf("round %d broadcast: %v", round, err)
				}
				for r := range n {
					got := fromFloat32s(f.download(r, recv[r], 4*count))
					for i, g := range got {
						if want := val(root, i, round); g != want {
							t.Fatalf("round %d broadcast rank %d [%d] = %v, want %v", round, r, i, g, want)
						}
					}
				}
				f.l.GroupStart(fixtureTid)
				for r := range n {
					to, from := (r+1)%n, (r+n-1)%n
					if err := f.l.Coll(fixtureTid, f.hs[r], Call{Kind: Send, Send: devPtr(send[r]), Count: uint64(count), Type: ncclFloat32, Root: to, Stream: f.ss[r].Handle()}); err != nil {
						t.Fatal(err)
					}
					if err := f.l.Coll(fixtureTid, f.hs[r], Call{Kind: Recv, Recv: devPtr(recv[r]), Count: uint64(count), Type: ncclFloat32, Root: from, Stream: f.ss[r].Handle()}); err != nil {
						t.Fatal(err)
					}
				}
				if err := f.l.GroupEnd(fixtureTid); err != nil {
					t.Fatalf("round %d send/recv ring: %v", round, err)
				}
				for r := range n {
					from := (r + n - 1) % n
					got := fromFloat32s(f.download(r, recv[r], 4*count))
					for i, g := range got {
						if want := val(from, i, round); g != want {
							t.Fatalf("round %d ring rank %d [%d] = %v, want %v (from rank %d)", round, r, i, g, want, from)
						}
					}
				}
			}
			for r := range n {
				c, err := f.l.handles.comm(f.hs[r], "test")
				if err != nil {
					t.Fatal(err)
				}
				if err := c.dc.AsyncError(); err != nil {
					t.Errorf("rank %d: async error %v", r, err)
				}
			}
		})
	}
}

// TestStallReported: ranks 0 and 2 of 3 wait in an allreduce that rank 1
// has not called, on their callers' threads (no deadline). After
// FLEXLINK_STALL_REPORT (its default, and a shorter one, whose report must
// come before the default could have), with the calls still waiting, each
// names rank 1 in its last error (what a launcher learns from the
// report), before anything ends the calls; an abort then ends them.
func TestStallReported(t *testing.T) {
	for _, tc := range []struct {
		setting string        // FLEXLINK_STALL_REPORT ("": the default)
		within  time.Duration // the report comes this soon
	}{{"", stallReport + 10*time.Second}, {"1s", stallReport - time.Second}} {
		t.Run("stall="+tc.setting, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_TIMEOUT": "60s"}
			if tc.setting != "" {
				env["FLEXLINK_STALL_REPORT"] = tc.setting
			}
			l := New(Options{Env: settings.Map(env)})
			hs := initRanks(t, l, 3)
			done := make(chan error, 2)
			start := time.Now()
			for _, r := range []int{0, 2} {
				go func() { _, err := allreduce(l, r, hs[r], 1); done <- err }()
			}
			c0, err := l.handles.comm(hs[0], "test")
			if err != nil {
				t.Fatal(err)
			}
			for !strings.Contains(c0.lastErr(), "rank 1 has not called AllReduce #1") {
				select {
				case err := <-done:
					t.Fatalf("a waiting allreduce ended before the stall was reported: %v", err)
				default:
				}
				if time.Since(start) > tc.within {
					t.Fatalf("no stall report naming rank 1 within %v; rank 0's last error: %q", tc.within, c0.lastErr())
				}
				<-time.After(50 * time.Millisecond)
			}
			for _, r := range []int{0, 2} {
				if err := l.Abort(hs[r]); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("an aborted allreduce did not return")
				}
			}
			_ = l.Abort(hs[1])
		})
	}
}
