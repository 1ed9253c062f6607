package bootstrap

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// refusalInterval is how often, at most, the server warns about the
// connections it refused (a port scan or a stray client must not flood
// the job's stderr); each refusal is logged at DEBUG.
const refusalInterval = 10 * time.Second

// refusals summarises refused connections: the first of an interval is
// warned about at once, the rest of it are counted and warned about as one
// line when the interval ends.
type refusals struct {
	log      hclog.Logger
	interval time.Duration

	mu       sync.Mutex
	n        int    // refusals counted since the last warning
	lastFrom string // the last counted refusal's peer and error
	lastErr  error
	timer    *time.Timer // the open interval; nil: none
	closed   bool
}

// note records one refused connection from from.
func (r *refusals) note(from string, err error) {
	r.log.Debug("dropped connection", "from", from, "error", err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.timer == nil {
		r.log.Warn("refused a connection (more in the next "+r.interval.String()+" are counted; FLEXLINK_DEBUG=DEBUG shows each)", "from", from, "error", err)
		r.timer = time.AfterFunc(r.interval, r.flush)
		return
	}
	r.n++
	r.lastFrom, r.lastErr = from, err
}

// flush warns about the interval's count, if any, and opens the next
// interval only when there was one.
func (r *refusals) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.timer = nil
	if r.n > 0 {
		r.warnCount()
		r.timer = time.AfterFunc(r.interval, r.flush)
	}
}

func (r *refusals) warnCount() {
	r.log.Warn("refused more connections", "count", r.n, "interval", r.interval.String(), "last_from", r.lastFrom, "last_error", r.lastErr)
	r.n = 0
}

// stop ends the summaries, warning about what is counted still.
func (r *refusals) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.n > 0 {
		r.warnCount()
	}
}
