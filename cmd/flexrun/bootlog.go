package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"flexlink/internal/errs"
)

// bootLog is the bootstrap server's logger as flexrun gives it: the
// server's ERROR lines about a failing job ("rank lost", "job failed") say
// what flexrun's own two lines say better (the cause first, then the ranks
// that failed because of it), so they go out at DEBUG; and the rank whose
// abort failed the job because it had lost a peer is reported on peerLost,
// so that the launcher never names it as the cause.
type bootLog struct {
	hclog.Logger
	peerLost chan<- int // nil: not reported
}

// newBootLog wraps l; sends on peerLost never block.
func newBootLog(l hclog.Logger, peerLost chan<- int) hclog.Logger {
	return &bootLog{Logger: l, peerLost: peerLost}
}

func (b *bootLog) Error(msg string, args ...any) { b.Log(hclog.Error, msg, args...) }

func (b *bootLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Error {
		switch msg {
		case "job failed":
			b.jobFailed(args)
			level = hclog.Debug
		case "rank lost":
			level = hclog.Debug
		}
	}
	b.Logger.Log(level, msg, args...)
}

// jobFailed reports the rank that aborted the job because it lost a peer.
func (b *bootLog) jobFailed(args []any) {
	for i := 0; i+1 < len(args); i += 2 {
		err, ok := args[i+1].(error)
		if args[i] != "error" || !ok || !errors.Is(err, errs.ErrPeerLost) {
			continue
		}
		if r, ok := abortingRank(err.Error()); ok && b.peerLost != nil {
			select {
			case b.peerLost <- r:
			default:
			}
		}
	}
}

// abortingRank finds N in the bootstrap's "job aborted by rank N: ..."
// (a rank's abort; the server's own findings and the launcher's abort
// name no rank there).
func abortingRank(text string) (int, bool) {
	const by = "job aborted by rank "
	i := strings.Index(text, by)
	if i < 0 {
		return 0, false
	}
	var r int
	if _, err := fmt.Sscanf(text[i+len(by):], "%d:", &r); err != nil {
		return 0, false
	}
	return r, true
}

func (b *bootLog) Named(name string) hclog.Logger {
	return &bootLog{Logger: b.Logger.Named(name), peerLost: b.peerLost}
}

func (b *bootLog) ResetNamed(name string) hclog.Logger {
	return &bootLog{Logger: b.Logger.ResetNamed(name), peerLost: b.peerLost}
}

func (b *bootLog) With(args ...any) hclog.Logger {
	return &bootLog{Logger: b.Logger.With(args...), peerLost: b.peerLost}
}
