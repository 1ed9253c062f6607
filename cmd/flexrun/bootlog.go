package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/launcher"
)

// bootLog is the bootstrap server's logger as flexrun gives it: the
// server's ERROR lines about a failing job ("rank lost", "job failed") say
// what flexrun's own two lines say better (the cause first, then the ranks
// that failed because of it), so they go out at DEBUG; and they are
// reported to the launcher: every rank the server itself found lost, in
// the order it found them ("rank lost"), and the job's first failure
// ("job failed": such a loss, or a rank that aborted because it had lost
// a peer, which the launcher then never names as the cause).
//
// The server has no other way to tell (bootstrap.ServerConfig has no
// hook); the messages read here are pinned by TestBootLog.
type bootLog struct {
	hclog.Logger
	reports chan<- launcher.BootstrapReport // nil: not reported
}

// newBootLog wraps l; sends on reports never block.
func newBootLog(l hclog.Logger, reports chan<- launcher.BootstrapReport) hclog.Logger {
	return &bootLog{Logger: l, reports: reports}
}

func (b *bootLog) Error(msg string, args ...any) { b.Log(hclog.Error, msg, args...) }

func (b *bootLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Error {
		switch msg {
		case "job failed":
			b.jobFailed(args)
			level = hclog.Debug
		case "rank lost":
			b.rankLost(args)
			level = hclog.Debug
		}
	}
	b.Logger.Log(level, msg, args...)
}

// jobFailed reports the job's first failure: a rank the server found
// lost ("bootstrap: rank N on host H lost: ...") or a rank that aborted
// because it lost a peer ("bootstrap: job aborted by rank N: ...", class
// peer lost).
func (b *bootLog) jobFailed(args []any) {
	for i := 0; i+1 < len(args); i += 2 {
		err, ok := args[i+1].(error)
		if args[i] != "error" || !ok || !errors.Is(err, errs.ErrPeerLost) || b.reports == nil {
			continue
		}
		if r, ok := failedRank(err.Error()); ok {
			select {
			case b.reports <- r:
			default:
			}
		}
	}
}

// rankLost reports a rank the server itself found gone ("rank lost",
// rank=N): first-hand, in the order the server found them, which the
// launcher prefers over ranks' second-hand "peer lost" reports.
func (b *bootLog) rankLost(args []any) {
	for i := 0; i+1 < len(args); i += 2 {
		if r, ok := args[i+1].(int); ok && args[i] == "rank" && b.reports != nil {
			select {
			case b.reports <- launcher.BootstrapReport{Rank: r, Lost: true}:
			default:
			}
			return
		}
	}
}

// failedRank reads the rank out of the bootstrap's failure text.
func failedRank(text string) (launcher.BootstrapReport, bool) {
	var r int
	if rest, ok := strings.CutPrefix(text, "bootstrap: job aborted by rank "); ok {
		if _, err := fmt.Sscanf(rest, "%d:", &r); err == nil {
			return launcher.BootstrapReport{Rank: r}, true
		}
		return launcher.BootstrapReport{}, false
	}
	var host string
	if _, err := fmt.Sscanf(text, "bootstrap: rank %d on host %s lost:", &r, &host); err == nil {
		return launcher.BootstrapReport{Rank: r, Lost: true}, true
	}
	return launcher.BootstrapReport{}, false
}

func (b *bootLog) Named(name string) hclog.Logger {
	return &bootLog{Logger: b.Logger.Named(name), reports: b.reports}
}

func (b *bootLog) ResetNamed(name string) hclog.Logger {
	return &bootLog{Logger: b.Logger.ResetNamed(name), reports: b.reports}
}

func (b *bootLog) With(args ...any) hclog.Logger {
	return &bootLog{Logger: b.Logger.With(args...), reports: b.reports}
}
