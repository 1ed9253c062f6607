package capi

import (
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/flog"
	"github.com/flexlink/flexlink/internal/settings"
)

// ncclDebugEnv is env with NCCL's logging variables read as their
// flexlink twins (docs/LOGGING.md), so that a program that sets
// NCCL_DEBUG=INFO gets flexlink's INFO lines through internal/flog like
// every other rank: a FLEXLINK_DEBUG* variable that is set wins; else
//   - NCCL_DEBUG: WARN, INFO and TRACE are the same words; VERSION reads
//     as WARN; other values are left out (NCCL ignores them too);
//   - NCCL_DEBUG_SUBSYS: the comma list (with NCCL's leading ^) keeps the
//     subsystems flexlink knows (INIT, COLL, P2P, SHM, NET, GRAPH, ENV,
//     BOOTSTRAP, ALL) and drops NCCL-only ones (TUNING, ALLOC, PROXY...);
//   - NCCL_DEBUG_FILE: the same pattern (%h host, %p pid).
func ncclDebugEnv(env settings.Env) settings.Env {
	mapped := map[string]string{}
	if v, ok := env("NCCL_DEBUG"); ok {
		switch w := strings.ToUpper(strings.TrimSpace(v)); w {
		case "WARN", "INFO", "TRACE":
			mapped["FLEXLINK_DEBUG"] = w
		case "VERSION":
			mapped["FLEXLINK_DEBUG"] = "WARN"
		}
	}
	if v, ok := env("NCCL_DEBUG_SUBSYS"); ok {
		if s := ncclSubsys(v); s != "" {
			mapped["FLEXLINK_DEBUG_SUBSYS"] = s
		}
	}
	if v, ok := env("NCCL_DEBUG_FILE"); ok && v != "" {
		mapped["FLEXLINK_DEBUG_FILE"] = v
	}
	return func(k string) (string, bool) {
		if v, ok := env(k); ok {
			return v, true
		}
		v, ok := mapped[k]
		return v, ok
	}
}

// ncclSubsys keeps the words of an NCCL_DEBUG_SUBSYS list that flexlink
// knows; "" when none is left.
func ncclSubsys(v string) string {
	v = strings.TrimSpace(v)
	neg := strings.HasPrefix(v, "^")
	var keep []string
	for w := range strings.SplitSeq(strings.TrimPrefix(v, "^"), ",") {
		w = strings.ToUpper(strings.TrimSpace(w))
		if _, err := flog.ParseSubsys(w); w != "" && err == nil {
			keep = append(keep, w)
		}
	}
	if len(keep) == 0 {
		return ""
	}
	s := strings.Join(keep, ",")
	if neg {
		s = "^" + s
	}
	return s
}

// logLevel is the level of the library's loggers: FLEXLINK_DEBUG's (or
// NCCL_DEBUG's, as ncclDebugEnv maps it); with neither set, none at all.
// NCCL prints nothing unless NCCL_DEBUG is set, and a program (PyTorch)
// that handles a failed call itself, with ncclGetLastError, must not find
// WARN lines in its stderr that it did not ask for.
func logLevel(env settings.Env) hclog.Level {
	if !env.IsSet("FLEXLINK_DEBUG") {
		return hclog.Off
	}
	level := hclog.LevelFromString(strings.ToLower(env.String("FLEXLINK_DEBUG")))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	return level
}

// processLogger is the library's own logger (rendezvous server, failed
// calls) when Options gives none: internal/flog over the mapped
// variables, tagged with the host, silent unless FLEXLINK_DEBUG or
// NCCL_DEBUG is set (logLevel); the communicators' loggers add their rank
// (commLogger).
func processLogger(env settings.Env) hclog.Logger {
	level := logLevel(env)
	mask, err := flog.ParseSubsys(env.String("FLEXLINK_DEBUG_SUBSYS"))
	if err != nil {
		mask = flog.Default
	}
	if level == hclog.Trace && !env.IsSet("FLEXLINK_DEBUG_SUBSYS") {
		mask = flog.All
	}
	host := join.HostName(env)
	var out io.Writer = os.Stderr
	if pattern := env.String("FLEXLINK_DEBUG_FILE"); pattern != "" {
		// %r has no rank here: the library's own lines go to rank -1's file.
		if f, err := os.OpenFile(flog.ExpandPath(pattern, host, os.Getpid(), -1), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
			out = f
		}
	}
	return flog.New(&hclog.LoggerOptions{Name: "flexlink", Level: level, Output: out}, mask).With("host", host)
}

// commLogger is the logger of the communicator of rank: the caller's
// Options.Logger (given) with the rank, else the same per-rank logger
// every flexlink rank has (join.NewLogger: FLEXLINK_DEBUG*, or NCCL_DEBUG*
// mapped by ncclDebugEnv, in env), silent when neither is set (logLevel).
func commLogger(given hclog.Logger, env settings.Env, host string, rank int) hclog.Logger {
	if given != nil {
		return given.With("rank", rank)
	}
	lg := join.NewLogger(env, host, rank)
	if level := logLevel(env); level == hclog.Off {
		lg.SetLevel(level)
	}
	return lg
}
