package join

import (
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"flexlink/internal/settings"
)

// NewLogger makes the per-process logger: level from FLEXLINK_DEBUG
// (WARN, INFO, DEBUG, TRACE, like NCCL_DEBUG), every line tagged with host
// and rank, written to stderr.
func NewLogger(env settings.Env, host string, rank int) hclog.Logger {
	level := hclog.LevelFromString(strings.ToLower(env.String("FLEXLINK_DEBUG")))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:   "flexlink",
		Level:  level,
		Output: os.Stderr,
	}).With("host", host, "rank", rank)
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
