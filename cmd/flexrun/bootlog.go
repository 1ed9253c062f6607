package main

import (
	"errors"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/launcher"
)

// bootLog is the bootstrap server's logger as flexrun gives it: the
// server's ERROR lines about a failing job ("rank lost", "job failed") say
// what flexrun's own two lines say better (the cause first, then the ranks
// that failed because of it), so they go out at DEBUG. What the server saw
// reaches the launcher through bootReports instead.
type bootLog struct {
	hclog.Logger
}

// newBootLog wraps l.
func newBootLog(l hclog.Logger) hclog.Logger { return &bootLog{Logger: l} }

func (b *bootLog) Error(msg string, args ...any) { b.Log(hclog.Error, msg, args...) }

func (b *bootLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Error && (msg == "job failed" || msg == "rank lost") {
		level = hclog.Debug
	}
	b.Logger.Log(level, msg, args...)
}

func (b *bootLog) Named(name string) hclog.Logger { return &bootLog{Logger: b.Logger.Named(name)} }

func (b *bootLog) ResetNamed(name string) hclog.Logger {
	return &bootLog{Logger: b.Logger.ResetNamed(name)}
}

func (b *bootLog) With(args ...any) hclog.Logger { return &bootLog{Logger: b.Logger.With(args...)} }

// bootReports turns the bootstrap server's events into the launcher's
// reports (nil report: none). Communicators' ends are read from the keys
// the ranks publish them under (comm.DecodeEnd); other puts are not
// reported.
func bootReports(report func(launcher.BootstrapReport)) func(bootstrap.Event) {
	if report == nil {
		return nil
	}
	return func(ev bootstrap.Event) {
		r := launcher.BootstrapReport{Rank: ev.Rank, Host: ev.Host, Text: ev.Text}
		switch ev.Kind {
		case bootstrap.EventJoined:
			r.Kind = launcher.ReportJoined
		case bootstrap.EventLeft:
			r.Kind = launcher.ReportLeft
		case bootstrap.EventLost:
			r.Kind = launcher.ReportLost
		case bootstrap.EventRefused:
			r.Kind = launcher.ReportRefused
		case bootstrap.EventFailed:
			// A rank that aborted the job because it lost a peer failed
			// because of another rank.
			if ev.Rank < 0 || !errors.Is(ev.Err, errs.ErrPeerLost) {
				return
			}
			r.Kind = launcher.ReportAbort
		case bootstrap.EventPut:
			e, ok := comm.DecodeEnd(ev.Key, ev.Value)
			if !ok {
				return
			}
			r.Kind = launcher.ReportEnd
			r.End = &launcher.CommEnd{Comm: e.Comm, Kind: e.Kind, Text: e.Text, ClosedBy: e.ClosedBy,
				ClosedCalls: e.ClosedCalls, InCall: e.InCall, Members: e.Members, Behind: e.Behind, Echo: e.Echo, Dup: ev.Dup}
		default:
			return
		}
		report(r)
	}
}
