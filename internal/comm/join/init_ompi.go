package join

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

// ompiWorld is what OpenMPI's mpirun tells each process.
type ompiWorld struct {
	rank, size int
	jobID      string // OMPI_MCA_ess_base_jobid (else PMIX_NAMESPACE)
	hnpURI     string // mpirun's own contact address: changes with every run
}

func readOMPI(getenv func(string) (string, bool)) (ompiWorld, error) {
	var w ompiWorld
	r, _ := getenv("OMPI_COMM_WORLD_RANK")
	n, _ := getenv("OMPI_COMM_WORLD_SIZE")
	var err1, err2 error
	w.rank, err1 = strconv.Atoi(r)
	w.size, err2 = strconv.Atoi(n)
	if err1 != nil || err2 != nil || w.size < 1 || w.rank < 0 || w.rank >= w.size {
		return w, fmt.Errorf("OMPI_COMM_WORLD_RANK=%q OMPI_COMM_WORLD_SIZE=%q: not a rank in a world", r, n)
	}
	if w.jobID, _ = getenv("OMPI_MCA_ess_base_jobid"); w.jobID == "" {
		w.jobID, _ = getenv("PMIX_NAMESPACE")
	}
	w.hnpURI, _ = getenv("OMPI_MCA_orte_hnp_uri")
	return w, nil
}

// initOMPIEnv joins a job started by mpirun in a binary built without the
// mpi tag: the ranks know their place from OMPI_COMM_WORLD_*, and
// FLEXLINK_BOOTSTRAP (passed with mpirun -x) says where rank 0 serves the
// bootstrap: it listens on that port, the others dial that address.
func initOMPIEnv(ctx context.Context, env settings.Env, getenv func(string) (string, bool), host string, build Build) error {
	w, err := readOMPI(getenv)
	if err != nil {
		return fmt.Errorf("rank init under mpirun: %w", err)
	}
	addr := env.String("FLEXLINK_BOOTSTRAP")
	if addr == "" {
		return fmt.Errorf("rank init: started by mpirun (rank %d of %d) without FLEXLINK_BOOTSTRAP: "+
			"pass -x FLEXLINK_BOOTSTRAP=HOST:PORT, where HOST is rank 0's host as the others reach it and PORT a free port there, "+
			"or build with -tags mpi, or launch with flexrun: %w", w.rank, w.size, errs.ErrNotSupported)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("rank init under mpirun: FLEXLINK_BOOTSTRAP=%q: want HOST:PORT", addr)
	}
	secret, hint, err := jobSecret(env, "mpirun "+w.jobID+" "+w.hnpURI)
	if err != nil {
		return fmt.Errorf("rank %d on %s (mpirun): %w", w.rank, host, err)
	}
	return joinServed(ctx, env, host, servedJob{
		launcher: "mpirun", rank: w.rank, size: w.size, listen: ":" + port, dial: addr,
		jobID: "mpi-" + w.jobID, secret: secret, secretHint: hint,
		portHint: " (FLEXLINK_BOOTSTRAP=" + addr + ": is the port free on rank 0's host?)",
	}, nil, build)
}
