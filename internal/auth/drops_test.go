package auth

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestDropsRateLimited: the first drop warns, the next ones within Every
// are counted silently, and the WARN after Every says how many.
func TestDropsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	d := &Drops{Log: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn}), What: "test", Every: time.Minute,
		Now: func() time.Time { return now }}
	for range 5 {
		d.Drop(errors.New("bad"))
	}
	if n := strings.Count(buf.String(), "[WARN]"); n != 1 || d.Count() != 5 {
		t.Fatalf("%d WARN lines after 5 drops in one minute (count %d), want 1:\n%s", n, d.Count(), buf.String())
	}
	now = now.Add(time.Minute)
	d.Drop(errors.New("bad"))
	if n := strings.Count(buf.String(), "[WARN]"); n != 2 || !strings.Contains(buf.String(), "dropped=5") {
		t.Fatalf("after a minute: %d WARN lines, want 2, the second with dropped=5:\n%s", n, buf.String())
	}
	var nilDrops *Drops
	nilDrops.Drop(errors.New("ignored")) // must not panic
}

// TestDropsSummary: drops counted silently are warned about when their
// Every ends, with no drop after them; Stop reports what is left at once;
// a summary armed before a WARN that came anyway says nothing.
func TestDropsSummary(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	type timer struct {
		after time.Duration
		f     func()
		live  bool
	}
	var timers []*timer
	d := &Drops{Log: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn}), What: "test", Every: time.Minute,
		Now: func() time.Time { return now },
		After: func(dt time.Duration, f func()) func() bool {
			tm := &timer{dt, f, true}
			timers = append(timers, tm)
			return func() bool { was := tm.live; tm.live = false; return was }
		}}
	warns := func() int { return strings.Count(buf.String(), "[WARN]") }
	d.Drop(errors.New("first"))
	now = now.Add(10 * time.Second)
	for range 3 {
		d.Drop(errors.New("more"))
	}
	if warns() != 1 || len(timers) != 1 || timers[0].after != 50*time.Second {
		t.Fatalf("after 4 drops: %d WARN lines, timers %+v; want 1 WARN and one summary due in 50s:\n%s", warns(), timers, buf.String())
	}
	now = now.Add(50 * time.Second)
	timers[0].f()
	if warns() != 2 || !strings.Contains(buf.String(), "dropped=3") {
		t.Fatalf("the summary: %d WARN lines, want 2, the second with dropped=3:\n%s", warns(), buf.String())
	}
	timers[0].f() // a second firing says nothing: nothing is unsaid
	now = now.Add(time.Second)
	d.Drop(errors.New("again")) // within a minute of the summary: counted, a new summary armed
	if warns() != 2 || len(timers) != 2 {
		t.Fatalf("a drop after the summary: %d WARN lines, %d timers; want 2 and 2", warns(), len(timers))
	}
	d.Stop()
	if warns() != 3 || !strings.Contains(buf.String(), "dropped=1") || timers[1].live {
		t.Fatalf("Stop: %d WARN lines (want 3, the last with dropped=1), summary still armed %v:\n%s", warns(), timers[1].live, buf.String())
	}
	timers[1].f() // fired late, after Stop reported it: nothing more
	if warns() != 3 || d.Count() != 5 {
		t.Fatalf("after Stop: %d WARN lines, count %d; want 3 and 5", warns(), d.Count())
	}
}
