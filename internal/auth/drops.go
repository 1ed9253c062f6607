package auth

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultEvery is how often Drops warns at most.
const DefaultEvery = time.Minute

// Drops counts the connections a listener dropped because they did not
// prove the job secret, and logs them: one WARN for the first, then at
// most one per Every with the number dropped since the last WARN. Drops
// counted silently are reported when their Every ends, even when no drop
// follows (a timer; Stop reports them at once), so a port scan or a flood
// of foreign connections can neither fill the log nor go unsaid. Each
// drop is also logged at DEBUG. The zero value needs Log set to log; a nil
// *Drops drops silently. Safe for concurrent use.
type Drops struct {
	Log   hclog.Logger     // nil: count only
	What  string           // what was dropped from: "gpu net part listener of rank 1"
	Every time.Duration    // 0: DefaultEvery
	Now   func() time.Time // nil: time.Now (tests inject a clock)
	// After runs f after d and returns a function that cancels it (nil:
	// time.AfterFunc; tests inject their own).
	After func(d time.Duration, f func()) (cancel func() bool)

	mu      sync.Mutex
	total   int
	unsaid  int       // dropped since the last WARN
	last    time.Time // of the last WARN
	warned  bool
	summary func() bool // cancels the armed summary of the unsaid drops; nil: none armed
	gen     int         // the armed summary's generation: a summary that fired late is ignored
	stopped bool
}

// Drop records one dropped connection and why; it warns when the last
// WARN is at least Every old (or there was none), and otherwise makes
// sure a summary WARN comes when Every has passed.
func (d *Drops) Drop(why error) {
	if d == nil {
		return
	}
	if d.Log != nil {
		d.Log.Debug("dropped connection", "listener", d.What, "why", why)
	}
	d.mu.Lock()
	d.total++
	d.unsaid++
	t := d.now()
	if d.warned && t.Sub(d.last) < d.every() {
		if d.summary == nil && !d.stopped {
			gen := d.gen
			d.summary = d.after(d.every()-t.Sub(d.last), func() { d.flush(gen) })
		}
		d.mu.Unlock()
		return
	}
	n := d.take(t)
	d.mu.Unlock()
	d.warn(n, why)
}

// flush is the summary armed in generation gen: it warns about the drops
// counted since the last WARN, if any.
func (d *Drops) flush(gen int) {
	d.mu.Lock()
	if gen != d.gen { // a WARN came since it was armed
		d.mu.Unlock()
		return
	}
	d.summary = nil
	if d.unsaid == 0 || d.stopped {
		d.mu.Unlock()
		return
	}
	n := d.take(d.now())
	d.mu.Unlock()
	d.warn(n, nil)
}

// Stop reports the drops not yet warned about, if any, and ends the
// summaries (later drops are counted and warned about as before, without
// a summary). Call it when the listener closes.
func (d *Drops) Stop() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.stopped = true
	n := d.unsaid
	if n > 0 {
		d.take(d.now())
	}
	d.mu.Unlock()
	if n > 0 {
		d.warn(n, nil)
	}
}

// take starts a new WARN at t and returns the drops it reports; d.mu is
// held.
func (d *Drops) take(t time.Time) int {
	n := d.unsaid
	d.warned, d.last, d.unsaid = true, t, 0
	d.gen++
	if d.summary != nil {
		d.summary()
		d.summary = nil
	}
	return n
}

func (d *Drops) warn(n int, why error) {
	if d.Log == nil {
		return
	}
	args := []any{"listener", d.What, "dropped", n}
	if why != nil {
		args = append(args, "why", why)
	}
	d.Log.Warn("dropped a connection that did not prove the job secret (a foreign or stale process, or a scan); waiting for the real peer",
		append(args, "next_warning_after", d.every())...)
}

func (d *Drops) every() time.Duration {
	if d.Every <= 0 {
		return DefaultEvery
	}
	return d.Every
}

func (d *Drops) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Drops) after(dt time.Duration, f func()) func() bool {
	if d.After != nil {
		return d.After(dt, f)
	}
	return time.AfterFunc(dt, f).Stop
}

// Count is the number of connections dropped so far.
func (d *Drops) Count() int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}
