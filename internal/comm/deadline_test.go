package comm

import (
	"context"
	"errors"
	"testing"
	"time"
)

type deadlineKey struct{}

// TestCallDeadline: the reused call context behaves as
// context.WithDeadline of the caller's context while the call runs, and
// as ended after it.
func TestCallDeadline(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	within := func(t *testing.T, ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not done after 5 s", what)
		}
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, d *callDeadline)
	}{
		{"deadline passes while waiting", func(t *testing.T, d *callDeadline) {
			at := time.Now().Add(20 * time.Millisecond)
			ctx := d.begin(context.Background(), at)
			if got, ok := ctx.Deadline(); !ok || !got.Equal(at) {
				t.Fatalf("Deadline() = %v, %v; want %v, true", got, ok, at)
			}
			if err := ctx.Err(); err != nil && time.Now().Before(at) {
				t.Fatalf("Err() before the deadline = %v", err)
			}
			within(t, ctx.Done(), "a wait past the deadline")
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err() = %v, want DeadlineExceeded", ctx.Err())
			}
			d.end()
		}},
		{"deadline passed before any wait", func(t *testing.T, d *callDeadline) {
			ctx := d.begin(context.Background(), time.Now().Add(-time.Millisecond))
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err() = %v, want DeadlineExceeded", ctx.Err())
			}
			within(t, ctx.Done(), "a wait after the deadline")
			d.end()
		}},
		{"the caller cancels while waiting", func(t *testing.T, d *callDeadline) {
			parent, cancel := context.WithCancel(context.Background())
			ctx := d.begin(parent, time.Now().Add(time.Hour))
			done := ctx.Done()
			cancel()
			within(t, done, "a wait whose caller canceled")
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Fatalf("Err() = %v, want Canceled", ctx.Err())
			}
			d.end()
		}},
		{"the caller canceled before any wait", func(t *testing.T, d *callDeadline) {
			parent, cancel := context.WithCancel(context.Background())
			ctx := d.begin(parent, time.Now().Add(time.Hour))
			cancel()
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Fatalf("Err() = %v, want Canceled", ctx.Err())
			}
			d.end()
		}},
		{"values and derived contexts", func(t *testing.T, d *callDeadline) {
			parent := context.WithValue(context.Background(), deadlineKey{}, "v")
			ctx := d.begin(parent, time.Now().Add(time.Hour))
			if v := ctx.Value(deadlineKey{}); v != "v" {
				t.Fatalf("Value before a wait = %v, want v", v)
			}
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			ran := make(chan struct{})
			context.AfterFunc(ctx, func() { close(ran) })
			if v := ctx.Value(deadlineKey{}); v != "v" {
				t.Fatalf("Value after a wait = %v, want v", v)
			}
			if closed(child.Done()) {
				t.Fatal("a derived context is done before the call ended")
			}
			d.end()
			within(t, child.Done(), "a derived context after the call")
			within(t, ran, "an AfterFunc after the call")
		}},
		{"the first error stays", func(t *testing.T, d *callDeadline) {
			parent, cancel := context.WithCancel(context.Background())
			ctx := d.begin(parent, time.Now().Add(-time.Millisecond))
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err() = %v, want DeadlineExceeded", ctx.Err())
			}
			cancel()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err() after the caller canceled = %v, want DeadlineExceeded still", ctx.Err())
			}
			d.end()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err() after a call that ran out of time = %v, want DeadlineExceeded", ctx.Err())
			}
			within(t, ctx.Done(), "a wait after a call that ran out of time")
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err() after a late wait = %v, want DeadlineExceeded", ctx.Err())
			}
		}},
		{"ended, then the next call", func(t *testing.T, d *callDeadline) {
			ctx := d.begin(context.Background(), time.Now().Add(time.Hour))
			done := ctx.Done()
			d.end()
			within(t, done, "the call's wait after it ended")
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Fatalf("Err() after the call = %v, want Canceled", ctx.Err())
			}
			within(t, ctx.Done(), "a wait made after the call ended")
			next := d.begin(context.Background(), time.Now().Add(time.Hour))
			if next.Err() != nil || closed(next.Done()) {
				t.Fatalf("the next call's context: Err %v, done %v; want a fresh one", next.Err(), closed(next.Done()))
			}
			d.end()
		}},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, new(callDeadline)) })
	}
}

// TestCallDeadlineNoAllocs: a call under the default deadline that does
// not wait (the flag kernels' enqueue) makes no allocation for it.
func TestCallDeadlineNoAllocs(t *testing.T) {
	var d callDeadline
	bg := context.Background()
	n := testing.AllocsPerRun(200, func() {
		ctx := d.begin(bg, time.Now().Add(time.Minute))
		if _, ok := ctx.Deadline(); !ok || ctx.Err() != nil || ctx.Value(deadlineKey{}) != nil {
			t.Fatal("a fresh call's context")
		}
		d.end()
	})
	if n != 0 {
		t.Fatalf("%v allocations per call, want 0", n)
	}
}
