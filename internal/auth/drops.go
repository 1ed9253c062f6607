package auth

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultEvery is how often Drops warns at most.
const DefaultEvery = time.Minute

// Drops counts the connections a listener dropped because they did not
// prove the job secret, and logs them: one WARN
// for the first, then at most one per Every with the number dropped since
// the last WARN, so a port scan or a flood of foreign connections cannot
// fill the log. The zero value needs Log set to log; a nil *Drops drops
// silently. Safe for concurrent use.
type Drops struct {
	Log   hclog.Logger     // nil: count only
	What  string           // what was dropped from: "gpu net part listener of rank 1"
	Every time.Duration    // 0: DefaultEvery
	Now   func() time.Time // nil: time.Now (tests inject a clock)

	mu     sync.Mutex
	total  int
	unsaid int       // dropped since the last WARN
	last   time.Time // of the last WARN
	warned bool
}

// Drop records one dropped connection and why; it warns when the last
// WARN is at least Every old (or there was none).
func (d *Drops) Drop(why error) {
	if d == nil {
		return
	}
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	every := d.Every
	if every <= 0 {
		every = DefaultEvery
	}
	d.mu.Lock()
	d.total++
	d.unsaid++
	t := now()
	if d.warned && t.Sub(d.last) < every {
		d.mu.Unlock()
		return
	}
	n := d.unsaid
	d.warned, d.last, d.unsaid = true, t, 0
	d.mu.Unlock()
	if d.Log != nil {
		d.Log.Warn("dropped a connection that did not prove the job secret (a foreign or stale process, or a scan); waiting for the real peer",
			"listener", d.What, "dropped", n, "why", why, "next_warning_after", every)
	}
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
