package shm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/internal/errs"
)

// The single-copy path's own tests. The conformance suite runs over it too
// (TestConformance); these check that it is really taken, when it is not,
// and the cases where its rendezvous differs from the copy path.

// forced sets single copy on from 64 KiB whatever it costs on this host.
func forced() map[string]string { return map[string]string{"FLEXLINK_SHM_CMA_BYTES": "65536"} }

// pulled returns how many bytes l received by single copy.
func pulled(l fabric.Link) uint64 { return l.(*link).in.pulled.Load() }

// ringBytesSent returns how many bytes l has written to its ring.
func ringBytesSent(l fabric.Link) uint64 { return l.(*link).out.ring.r.head.Load() }

// exchange sends an n-byte message from one link to the other and checks
// that it arrived intact.
func exchange(t *testing.T, from, to fabric.Link, tag, n int) {
	t.Helper()
	msg, got := linktest.Payload(uint64(tag), n), make([]byte, n)
	r := to.Recv(linktest.TagOf(tag), got)
	linktest.AwaitOK(t, from.Send(linktest.TagOf(tag), msg), fmt.Sprintf("send of %d bytes", n))
	linktest.AwaitOK(t, r, fmt.Sprintf("recv of %d bytes", n))
	if string(got) != string(msg) {
		t.Fatalf("%d-byte message arrived corrupted", n)
	}
}

func TestSingleCopyUsed(t *testing.T) {
	a, b := newPair(t, forced())
	exchange(t, a, b, 0, 64<<10-1)
	if n := pulled(b); n != 0 {
		t.Fatalf("a message below FLEXLINK_SHM_CMA_BYTES was pulled by single copy (%d bytes)", n)
	}
	before := ringBytesSent(a)
	exchange(t, a, b, 1, 1<<20)
	if n := pulled(b); n != 1<<20 {
		t.Fatalf("pulled %d bytes of a 1 MiB message by single copy, want all", n)
	}
	if d := ringBytesSent(a) - before; d != frameBytes {
		t.Fatalf("the ring carried %d bytes for a single-copy message, want only its %d-byte frame", d, frameBytes)
	}
	exchange(t, b, a, 2, 64<<10) // the threshold itself, the other way
	if n := pulled(a); n != 64<<10 {
		t.Fatalf("pulled %d bytes of a 64 KiB message, want all (the threshold is inclusive)", n)
	}
	if d := a.Props().Desc; !strings.Contains(d, "single-copy out >=65536 B, in on") {
		t.Errorf("link description %q does not say single copy is on", d)
	}
}

func TestSingleCopyOff(t *testing.T) {
	a, b := newPair(t, map[string]string{"FLEXLINK_SHM_CMA_BYTES": "0"})
	exchange(t, a, b, 0, 1<<20)
	exchange(t, b, a, 1, 1<<20)
	if pulled(a)+pulled(b) != 0 {
		t.Fatalf("FLEXLINK_SHM_CMA_BYTES=0, yet %d bytes went by single copy", pulled(a)+pulled(b))
	}
	if d := a.Props().Desc; !strings.Contains(d, "single-copy out off, in off") {
		t.Errorf("link description %q does not say single copy is off", d)
	}
}

// TestSingleCopyRefused has rank 0's probe fail as a kernel that forbids
// process_vm_readv makes it fail: rank 0 cannot pull, so messages to it
// are copied, while rank 1 still pulls from rank 0. The fallback is logged
// at DEBUG.
func TestSingleCopyRefused(t *testing.T) {
	var logs linktest.LogBuffer
	a, b := newPairWith(t, forced(), func(rank int, e *endpoint) {
		e.log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
		if rank == 0 {
			e.cma.readv = deny
		}
	})
	exchange(t, a, b, 0, 1<<20)
	exchange(t, b, a, 1, 1<<20)
	if pulled(b) != 1<<20 || pulled(a) != 0 {
		t.Fatalf("pulled by single copy: rank 1 %d bytes (want 1 MiB), rank 0 %d (want 0: its probe failed)", pulled(b), pulled(a))
	}
	for _, w := range []string{"[DEBUG]", "single-copy (CMA) reads not permitted", "operation not permitted"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, logs.String())
		}
	}
}

// TestSingleCopyMismatch: a receive of the wrong tag or size consumes the
// single-copy message without reading it and fails with ErrMismatch; the
// send completes normally and the link goes on.
func TestSingleCopyMismatch(t *testing.T) {
	for _, n := range []int{1 << 20, 64 << 20} {
		for _, tc := range []struct {
			name      string
			tag, size int
		}{{"Tag", 99, n}, {"Shorter", 0, n - 1}, {"Longer", 0, n + 1}} {
			t.Run(fmt.Sprintf("%dMiB/%s", n>>20, tc.name), func(t *testing.T) {
				a, b := newPair(t, forced())
				s := a.Send(linktest.TagOf(0), linktest.Payload(0, n))
				err := linktest.Await(t, b.Recv(linktest.TagOf(tc.tag), make([]byte, tc.size)), "mismatched recv")
				if !errors.Is(err, errs.ErrMismatch) {
					t.Fatalf("recv error %v, want one wrapping ErrMismatch", err)
				}
				if _, ok := fabric.AsTagMismatch(err); ok != (tc.tag != 0) {
					t.Fatalf("recv error %v: tag mismatch %v, want %v", err, ok, tc.tag != 0)
				}
				linktest.AwaitOK(t, s, "send of the mismatched message")
				if pulled(b) != 0 {
					t.Fatalf("the mismatched message was read (%d bytes)", pulled(b))
				}
				exchange(t, a, b, 1, n)
				if pulled(b) != uint64(n) {
					t.Fatalf("the next message pulled %d bytes, want %d", pulled(b), n)
				}
			})
		}
	}
}

// TestSingleCopySendWaitsForPull: a single-copy send is a rendezvous. A
// small send posted after it completes with no receive posted (it is in
// the ring), but the large one stays pending until the peer pulled it.
func TestSingleCopySendWaitsForPull(t *testing.T) {
	a, b := newPair(t, forced())
	msg := linktest.Payload(0, 1<<20)
	big := a.Send(linktest.TagOf(0), msg)
	linktest.AwaitOK(t, a.Send(linktest.TagOf(1), []byte("small")), "small send after a large one")
	select {
	case <-big.Done():
		t.Fatalf("single-copy send completed (%v) before any receive was posted", big.Err())
	default:
	}
	got := make([]byte, len(msg))
	linktest.AwaitOK(t, b.Recv(linktest.TagOf(0), got), "recv of the large message")
	linktest.AwaitOK(t, big, "large send")
	linktest.AwaitOK(t, b.Recv(linktest.TagOf(1), make([]byte, 5)), "recv of the small message")
	if string(got) != string(msg) {
		t.Fatal("large message arrived corrupted")
	}
}

// TestSingleCopySenderAborts: once the sender aborted, its pending send has
// failed and its buffer is the caller's again, so the receiver must not
// deliver what it would read there.
func TestSingleCopySenderAborts(t *testing.T) {
	a, b := newPair(t, forced())
	s := a.Send(linktest.TagOf(0), linktest.Payload(0, 1<<20))
	abortErr := errors.New("test abort")
	a.Abort(abortErr)
	if err := linktest.Await(t, s, "pending single-copy send after Abort"); !errors.Is(err, abortErr) {
		t.Fatalf("pending send after Abort: %v, want the abort error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := b.Recv(linktest.TagOf(0), make([]byte, 1<<20)).Wait(ctx)
	if !errors.Is(err, errs.ErrPeerLost) || pulled(b) != 0 {
		t.Fatalf("recv of an aborted sender's message: %v after pulling %d bytes; want ErrPeerLost, nothing pulled", err, pulled(b))
	}
}

// TestSingleCopyReceiverAborts aborts the receiver between two pieces of a
// 64 MiB pull: the receive fails with the abort error, and the sender's
// pending send with ErrPeerLost within 2 s.
func TestSingleCopyReceiverAborts(t *testing.T) {
	a, b := newPair(t, forced())
	abortErr := errors.New("test abort")
	bl := b.(*link)
	bl.in.pullHook = func(n int) {
		if n == cmaPiece {
			b.Abort(abortErr)
		}
	}
	r := b.Recv(linktest.TagOf(0), make([]byte, 64<<20))
	s := a.Send(linktest.TagOf(0), linktest.Payload(0, 64<<20))
	if err := linktest.Await(t, r, "recv aborted while pulling"); !errors.Is(err, abortErr) {
		t.Fatalf("recv aborted while pulling: %v, want the abort error", err)
	}
	if n := pulled(b); n != cmaPiece {
		t.Errorf("pulled %d bytes, want one piece (%d): the abort must stop the pull", n, cmaPiece)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Wait(ctx); !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("send whose receiver aborted: %v, want ErrPeerLost within 2 s", err)
	}
}

func TestSpinBudget(t *testing.T) {
	for _, tc := range []struct {
		local, cpus int
		want        time.Duration
	}{
		{0, 2, spinFor}, // not launched by flexrun: unknown, keep spinning
		{1, 2, spinFor},
		{2, 4, spinFor},
		{2, 2, 0}, // a rank per core: the spinner would take a peer's core
		{4, 2, 0},
		{64, 16, 0},
	} {
		if got := spinBudget(tc.local, tc.cpus); got != tc.want {
			t.Errorf("spinBudget(%d ranks, %d cpus) = %v, want %v", tc.local, tc.cpus, got, tc.want)
		}
	}
}

func TestBadCMASetting(t *testing.T) {
	for _, v := range []string{"-1", "lots"} {
		if e, err := NewEndpoint(config("j", 0, map[string]string{"FLEXLINK_SHM_CMA_BYTES": v})); err == nil {
			e.Close()
			t.Errorf("NewEndpoint with FLEXLINK_SHM_CMA_BYTES=%s succeeded", v)
		}
	}
}

// TestSingleCopyReadFails has the kernel fail a pull after its first piece:
// ESRCH (the sender exited) and EFAULT (its buffer is not there) both end
// the receive with ErrPeerLost, and the link with it.
func TestSingleCopyReadFails(t *testing.T) {
	for _, tc := range []struct {
		errno unix.Errno
		say   string
	}{{unix.ESRCH, "exited during a single-copy read"}, {unix.EFAULT, "bad address"}} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			a, b := newPair(t, forced())
			calls := 0
			b.(*link).cma.read = func(pid int, local []byte, remote uint64) (int, error) {
				if calls++; calls > 1 {
					return -1, tc.errno
				}
				return processRead(pid, local, remote)
			}
			r := b.Recv(linktest.TagOf(0), make([]byte, 3*cmaPiece))
			s := a.Send(linktest.TagOf(0), linktest.Payload(0, 3*cmaPiece))
			err := linktest.Await(t, r, "recv whose pull fails")
			if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("recv whose pull fails with %v: %v, want ErrPeerLost saying %q", tc.errno, err, tc.say)
			}
			if err := linktest.Await(t, b.Recv(linktest.TagOf(1), nil), "recv on the failed link"); !errors.Is(err, errs.ErrPeerLost) {
				t.Fatalf("recv on a link whose pull failed: %v, want ErrPeerLost", err)
			}
			if tc.errno == unix.EFAULT { // the receiver aborted: the sender hears of it
				if err := linktest.Await(t, s, "send whose pull failed"); !errors.Is(err, errs.ErrPeerLost) {
					t.Fatalf("send whose receiver aborted: %v, want ErrPeerLost", err)
				}
			}
		})
	}
}

// TestSingleCopyAuto: with auto a rank pulls only when its
// measurement says the pull beats the ring copies, with the margin that
// depends on oversubscription; it measures once per endpoint.
func TestSingleCopyAuto(t *testing.T) {
	const us = time.Microsecond
	for _, tc := range []struct {
		name      string
		cma, cpy  time.Duration
		oversub   bool
		wantPulls bool
	}{
		{"Cheap", 20 * us, 30 * us, false, true},
		{"DearerThanOneCopy", 45 * us, 30 * us, false, false},
		{"DearerThanOneCopyOversubscribed", 45 * us, 30 * us, true, true},
		{"ThreeCopies", 90 * us, 30 * us, true, false}, // the 2-core KVM guest this was written on
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			a, b := newPairWith(t, map[string]string{"FLEXLINK_SHM_CMA_BYTES": "auto"}, func(_ int, e *endpoint) {
				e.cma.oversub = tc.oversub
				e.cma.measure = func(readvFunc) (time.Duration, time.Duration, error) {
					calls.Add(1)
					return tc.cma, tc.cpy, nil
				}
			})
			exchange(t, a, b, 0, 1<<20)
			exchange(t, b, a, 1, 1<<20)
			want := uint64(0)
			if tc.wantPulls {
				want = 1 << 20
			}
			if pulled(a) != want || pulled(b) != want {
				t.Fatalf("pulled %d and %d bytes, want %d each", pulled(a), pulled(b), want)
			}
			if n := calls.Load(); n != 2 {
				t.Errorf("measured %d times, want once per endpoint", n)
			}
		})
	}
	cma, cpy, err := measureCMA(processRead)
	if err != nil || cma <= 0 || cpy <= 0 {
		t.Fatalf("measuring this host: pull %v, memmove %v, error %v", cma, cpy, err)
	}
	t.Logf("this host: a %d-byte pull takes %v, memmove %v", calibrationBytes, cma, cpy)
}
