package flog

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
)

// Logger is an hclog.Logger that writes lines below WARN only when their
// subsystem is selected, and that never writes a key twice on one line:
// a key the logger already carries (With) is dropped from the line when
// it has the same value, and written as peer_<key> when it differs (the
// bootstrap server's "rank joined rank=3" on rank 0's logger).
//
// Sub-loggers (Named, ResetNamed, With) keep the selection; Named gives
// the sub-logger the subsystem its name implies (shm, tcp, bootstrap...).
type Logger struct {
	hclog.Logger
	mask Subsys // selected subsystems
	sub  Subsys // this logger's subsystem; 0: none (always written)
}

// New makes a Logger writing with opts for the subsystems in mask.
func New(opts *hclog.LoggerOptions, mask Subsys) *Logger {
	return &Logger{Logger: hclog.New(opts), mask: mask}
}

// Sub returns lg for lines of subsystem s (a Logger; any other logger is
// returned as it is).
func Sub(lg hclog.Logger, s Subsys) hclog.Logger {
	if fl, ok := lg.(*Logger); ok {
		c := *fl
		c.sub = s
		return &c
	}
	return lg
}

// Enabled reports whether lg writes a line of subsystem s at level: the
// level is on and s is selected (for a logger that is not a Logger, s is
// in Default). It does not allocate: call it before building an
// expensive line on a hot path.
func Enabled(lg hclog.Logger, s Subsys, level hclog.Level) bool {
	mask := Default
	if fl, ok := lg.(*Logger); ok {
		mask, lg = fl.mask, fl.Logger
	}
	return mask&s != 0 && levelOn(lg, level)
}

// Selected is the set of subsystems lg writes below WARN.
func Selected(lg hclog.Logger) Subsys {
	if fl, ok := lg.(*Logger); ok {
		return fl.mask
	}
	return Default
}

func levelOn(lg hclog.Logger, level hclog.Level) bool {
	switch level {
	case hclog.Trace:
		return lg.IsTrace()
	case hclog.Debug:
		return lg.IsDebug()
	case hclog.Info:
		return lg.IsInfo()
	case hclog.Warn:
		return lg.IsWarn()
	}
	return lg.IsError()
}

func (l *Logger) on() bool { return l.sub == 0 || l.mask&l.sub != 0 }

func (l *Logger) Log(level hclog.Level, msg string, args ...any) {
	if level >= hclog.Warn || l.on() {
		l.Logger.Log(level, msg, l.clean(args)...)
	}
}

func (l *Logger) Trace(msg string, args ...any) {
	if l.on() && l.Logger.IsTrace() {
		l.Logger.Trace(msg, l.clean(args)...)
	}
}

func (l *Logger) Debug(msg string, args ...any) {
	if l.on() && l.Logger.IsDebug() {
		l.Logger.Debug(msg, l.clean(args)...)
	}
}

func (l *Logger) Info(msg string, args ...any) {
	if l.on() && l.Logger.IsInfo() {
		l.Logger.Info(msg, l.clean(args)...)
	}
}

func (l *Logger) Warn(msg string, args ...any) {
	if l.Logger.IsWarn() {
		l.Logger.Warn(msg, l.clean(args)...)
	}
}

func (l *Logger) Error(msg string, args ...any) {
	if l.Logger.IsError() {
		l.Logger.Error(msg, l.clean(args)...)
	}
}

func (l *Logger) IsTrace() bool { return l.on() && l.Logger.IsTrace() }
func (l *Logger) IsDebug() bool { return l.on() && l.Logger.IsDebug() }
func (l *Logger) IsInfo() bool  { return l.on() && l.Logger.IsInfo() }

func (l *Logger) With(args ...any) hclog.Logger {
	return &Logger{Logger: l.Logger.With(l.clean(args)...), mask: l.mask, sub: l.sub}
}

func (l *Logger) Named(name string) hclog.Logger {
	sub := l.sub
	if s := ofName(name); s != 0 {
		sub = s
	}
	return &Logger{Logger: l.Logger.Named(name), mask: l.mask, sub: sub}
}

func (l *Logger) ResetNamed(name string) hclog.Logger {
	return &Logger{Logger: l.Logger.ResetNamed(name), mask: l.mask, sub: ofName(name)}
}

// clean drops or renames the keys of args that the logger already
// carries (see Logger). It returns args itself when none do.
func (l *Logger) clean(args []any) []any {
	implied := l.Logger.ImpliedArgs()
	if len(implied) == 0 || len(args) < 2 {
		return args
	}
	var out []any
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := args[i].(string)
		v, dup := valueOf(implied, k)
		if !dup {
			if out != nil {
				out = append(out, args[i], args[i+1])
			}
			continue
		}
		if out == nil {
			out = append(make([]any, 0, len(args)), args[:i]...)
		}
		if fmt.Sprint(v) != fmt.Sprint(args[i+1]) {
			out = append(out, "peer_"+k, args[i+1])
		}
	}
	if out == nil {
		return args
	}
	if len(args)%2 == 1 {
		out = append(out, args[len(args)-1])
	}
	return out
}

func valueOf(kv []any, key string) (any, bool) {
	if key == "" {
		return nil, false
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok && k == key {
			return kv[i+1], true
		}
	}
	return nil, false
}
