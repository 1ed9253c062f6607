//go:build !mpi

package join

import (
	"context"

	"github.com/flexlink/flexlink/internal/settings"
)

// initMPI joins a job started by mpirun. Without the mpi build tag there
// is no MPI library to ask: the environment has to say where rank 0
// serves the bootstrap (initOMPIEnv).
func initMPI(ctx context.Context, env settings.Env, getenv func(string) (string, bool), host string, build Build) error {
	return initOMPIEnv(ctx, env, getenv, host, build)
}
