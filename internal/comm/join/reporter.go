package join

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/settings"
)

// A process that runs under flexrun but is none of its flexlink ranks'
// worlds (flexlink's libnccl in a PyTorch rank: its communicators meet on
// rendezvous of their own) still tells flexrun why its communicators
// ended, so that flexrun's verdict names the first cause: it joins the
// job's store as its rank only to publish those ends, then says goodbye.
// It names its host with reporterPrefix, so that the launcher knows that
// its join, goodbye or loss says nothing about the program's use of the
// store (a PyTorch rank that never publishes never joins; one that exits
// 0 without NCCL's teardown has not "exited without closing the job").

// reporterPrefix marks the host name a reporter gives itself (a prefix:
// the server keeps the first 255 bytes of a host name; no host name has
// an '@').
const reporterPrefix = "libnccl-report@"

// ReporterHost is the host name a reporter on host dials the job's store
// with.
func ReporterHost(host string) string { return reporterPrefix + host }

// IsReporterHost reports whether host, as a rank named itself to the
// job's store, is a reporter's (ReporterHost).
func IsReporterHost(host string) bool { return strings.HasPrefix(host, reporterPrefix) }

// Reporter is where a reporter publishes: the job's store, joined as
// Rank.
type Reporter struct {
	Store bootstrap.Store
	Rank  int // this process's rank in flexrun's job (FLEXLINK_RANK)
}

// ErrNoLauncher: the process was not started by flexrun (no FLEXLINK_RANK
// or FLEXLINK_BOOTSTRAP in its environment): there is no one to report to.
var ErrNoLauncher = errors.New("not started by flexrun")

// LauncherRank is this process's rank in flexrun's job (FLEXLINK_RANK),
// ok false when it was not started by flexrun.
func LauncherRank(env settings.Env) (int, bool) {
	if !env.IsSet("FLEXLINK_RANK") || env.String("FLEXLINK_BOOTSTRAP") == "" {
		return -1, false
	}
	r, err := env.Int("FLEXLINK_RANK")
	if err != nil || r < 0 {
		return -1, false
	}
	return r, true
}

// DialReporter joins, as a reporter, the store of the flexrun job this
// process is a rank of (FLEXLINK_RANK, FLEXLINK_WORLD_SIZE,
// FLEXLINK_BOOTSTRAP, FLEXLINK_JOB_ID, FLEXLINK_JOB_SECRET, with the
// silence limit FLEXLINK_LIVENESS_TIMEOUT), within ctx. It fails with
// ErrNoLauncher outside flexrun. The caller closes the store (its
// goodbye) once it has published.
func DialReporter(ctx context.Context, env settings.Env, lg hclog.Logger) (Reporter, error) {
	r, ok := LauncherRank(env)
	if !ok {
		return Reporter{}, ErrNoLauncher
	}
	n, err := env.Int("FLEXLINK_WORLD_SIZE")
	if err != nil {
		return Reporter{}, fmt.Errorf("report to flexrun: %w", err)
	}
	secret, err := hex.DecodeString(env.String("FLEXLINK_JOB_SECRET"))
	if err != nil || len(secret) == 0 {
		return Reporter{}, errors.New("report to flexrun: FLEXLINK_JOB_SECRET is missing or not hex")
	}
	liveness, err := env.Duration("FLEXLINK_LIVENESS_TIMEOUT")
	if err != nil {
		return Reporter{}, fmt.Errorf("report to flexrun: %w", err)
	}
	addr := env.String("FLEXLINK_BOOTSTRAP")
	store, err := bootstrap.Dial(ctx, bootstrap.DialConfig{Addr: addr, Rank: r, Size: n, Secret: secret,
		JobID: env.String("FLEXLINK_JOB_ID"), Host: ReporterHost(HostName(env)), PeerTimeout: liveness, Logger: lg})
	if err != nil {
		return Reporter{}, fmt.Errorf("report to flexrun: rank %d: join the job's store at %s: %w", r, addr, err)
	}
	return Reporter{Store: store, Rank: r}, nil
}
