// Package join is how a process joins its job: under flexrun (the
// FLEXLINK_* environment), under mpirun (OpenMPI's environment, with or
// without the MPI library), under srun (Slurm's), or alone (a world of one).
// It finds or serves the bootstrap, derives the job's secret, and builds the
// world communicator through the caller's Build (comm.Init passes
// comm.New). It knows nothing of communicators: it hands over a store.
package join

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/settings"
)

// Init joins the job described by the environment that flexrun (or a
// compatible launcher) sets: FLEXLINK_RANK, FLEXLINK_WORLD_SIZE,
// FLEXLINK_BOOTSTRAP, FLEXLINK_JOB_ID, FLEXLINK_JOB_SECRET. With no launcher
// environment at all it returns a world of one rank (like MPI's singleton
// init). Started by srun or mpirun without flexrun, it joins through a
// bootstrap server that rank 0 runs (see docs/LAUNCH.md). It waits at
// most FLEXLINK_BOOTSTRAP_TIMEOUT for every rank to join.
func Init(ctx context.Context, build Build) error {
	env := settings.OS()
	host := HostName(env)
	if !env.IsSet("FLEXLINK_RANK") {
		if _, ok := os.LookupEnv("OMPI_COMM_WORLD_RANK"); ok {
			return initMPI(ctx, env, os.LookupEnv, host, build)
		}
		if inSlurmStep(os.LookupEnv) {
			return initSlurm(ctx, env, os.LookupEnv, host, build)
		}
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return fmt.Errorf("rank init: %w", err)
		}
		stores := bootstrap.NewInProc(1)
		return build(ctx, stores[0], Options{Env: env, Host: host, JobID: fmt.Sprintf("single-%d", os.Getpid()), Secret: secret})
	}
	r, err := env.Int("FLEXLINK_RANK")
	if err != nil {
		return fmt.Errorf("rank init: %w", err)
	}
	n, err := env.Int("FLEXLINK_WORLD_SIZE")
	if err != nil {
		return fmt.Errorf("rank init: %w", err)
	}
	if n < 1 || r < 0 || r >= n {
		return fmt.Errorf("rank init: FLEXLINK_RANK=%d out of range for FLEXLINK_WORLD_SIZE=%d", r, n)
	}
	addr := env.String("FLEXLINK_BOOTSTRAP")
	if addr == "" {
		return errors.New("rank init: FLEXLINK_BOOTSTRAP is not set (launch with flexrun)")
	}
	secret, err := hex.DecodeString(env.String("FLEXLINK_JOB_SECRET"))
	if err != nil || len(secret) == 0 {
		return errors.New("rank init: FLEXLINK_JOB_SECRET is missing or not hex (launch with flexrun)")
	}
	timeout, err := env.Duration("FLEXLINK_BOOTSTRAP_TIMEOUT")
	if err != nil {
		return fmt.Errorf("rank init: %w", err)
	}
	liveness, err := env.Duration("FLEXLINK_LIVENESS_TIMEOUT")
	if err != nil {
		return fmt.Errorf("rank init: %w", err)
	}
	jobID := env.String("FLEXLINK_JOB_ID")
	lg := NewLogger(env, host, r)
	dctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	store, err := bootstrap.Dial(dctx, bootstrap.DialConfig{
		Addr: addr, Rank: r, Size: n, Secret: secret, JobID: jobID, Host: host, Logger: lg, PeerTimeout: liveness,
	})
	if err != nil {
		return fmt.Errorf("rank %d on %s: join bootstrap at %s: %w", r, host, addr, err)
	}
	if err := build(dctx, store, Options{Env: env, Host: host, Logger: lg, JobID: jobID, Secret: secret}); err != nil {
		store.Close()
		return err
	}
	return nil
}

// Options say who this process is in the job: where settings come from, its
// host name, logger, job id and secret. Zero values mean "from the
// environment" to comm.New.
type Options struct {
	Env    settings.Env // settings source; nil: the process environment
	Host   string       // this rank's host name; "": os.Hostname
	Logger hclog.Logger // nil: FLEXLINK_DEBUG-levelled stderr logger
	JobID  string       // names shared-memory segments; "": FLEXLINK_JOB_ID
	Secret []byte       // authenticates data links; nil: FLEXLINK_JOB_SECRET
}

// Build makes the world communicator over the joined store. It is called at
// most once, with ctx bounded by FLEXLINK_BOOTSTRAP_TIMEOUT; when it fails,
// the join releases the store (collectively where the launcher needs it).
type Build func(ctx context.Context, store bootstrap.Store, opt Options) error
