package join

import (
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/flog"
	"github.com/flexlink/flexlink/internal/settings"
)

// NewLogger makes the per-process logger, like NCCL_DEBUG: level from
// FLEXLINK_DEBUG (WARN, INFO, DEBUG, TRACE), subsystems from
// FLEXLINK_DEBUG_SUBSYS (INIT,NET when unset; every subsystem when unset
// and the level is TRACE), every line tagged with host and rank, written
// to FLEXLINK_DEBUG_FILE (%h host, %p pid, %r rank) or else stderr.
func NewLogger(env settings.Env, host string, rank int) hclog.Logger {
	return newLogger(env, host, rank, nil)
}

// newLogger is NewLogger with hclog's Exclude hook.
func newLogger(env settings.Env, host string, rank int, exclude func(hclog.Level, string, ...any) bool) hclog.Logger {
	level := hclog.LevelFromString(strings.ToLower(env.String("FLEXLINK_DEBUG")))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	mask, err := flog.ParseSubsys(env.String("FLEXLINK_DEBUG_SUBSYS"))
	if err != nil {
		mask = flog.Default // settings.Validate reports the value
	}
	if level == hclog.Trace && !env.IsSet("FLEXLINK_DEBUG_SUBSYS") {
		mask = flog.All
	}
	var out io.Writer = os.Stderr
	var fileErr error
	path := ""
	if pattern := env.String("FLEXLINK_DEBUG_FILE"); pattern != "" {
		path = flog.ExpandPath(pattern, host, os.Getpid(), rank)
		// Opened for appending and never closed, like NCCL_DEBUG_FILE:
		// it lives as long as the process, and the loggers a process
		// makes (join, communicator) may share it.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fileErr = err
		} else {
			out = f
		}
	}
	lg := flog.New(&hclog.LoggerOptions{
		Name:    "flexlink",
		Level:   level,
		Output:  out,
		Exclude: exclude,
	}, mask).With("host", host, "rank", rank)
	if fileErr != nil {
		lg.Warn("cannot open FLEXLINK_DEBUG_FILE; logging to stderr", "path", path, "error", fileErr)
	}
	return lg
}

// HostName is this host's name for the job: FLEXLINK_HOSTNAME, else the
// system host name.
func HostName(env settings.Env) string {
	if h := env.String("FLEXLINK_HOSTNAME"); h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}
