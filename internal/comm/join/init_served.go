package join

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/settings"
)

// servedJob is a job started without flexrun (srun, mpirun): rank 0 runs
// the bootstrap server in its own process, and every rank, rank 0
// included, joins it over TCP.
type servedJob struct {
	launcher string // "srun" or "mpirun", for messages
	rank     int
	size     int
	listen   string // where rank 0 serves, e.g. ":23456"
	dial     string // where the other ranks dial, host:port
	jobID    string
	secret   []byte
	// secretHint is added to a failed join: where the secret comes from,
	// since ranks that derived different secrets cannot join.
	secretHint string
	portHint   string // added when rank 0 cannot listen
	// barrier, when set, is a barrier outside the bootstrap (MPI_Barrier):
	// every rank leaves the job, then waits in it, then rank 0 stops the
	// server, so no rank sees the server go before its goodbye.
	barrier func()
	// finish, when set, runs once the rank has left the job (MPI_Finalize).
	finish func()
}

// leaveTimeout bounds how long rank 0 keeps its server up for the other
// ranks to say that they are leaving.
const leaveTimeout = 2 * time.Second

// joinServed joins sj: rank 0 starts the server first, unless it passes
// one it has started already (srv). It waits at most
// FLEXLINK_BOOTSTRAP_TIMEOUT for every rank.
func joinServed(ctx context.Context, env settings.Env, host string, sj servedJob, srv *bootstrap.Server, build Build) error {
	timeout, err := env.Duration("FLEXLINK_BOOTSTRAP_TIMEOUT")
	if err != nil {
		return fmt.Errorf("rank init: %w", err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	liveness, err := env.Duration("FLEXLINK_LIVENESS_TIMEOUT")
	if err != nil {
		return fmt.Errorf("rank init: %w", err)
	}
	lg := NewLogger(env, host, sj.rank)
	addr := sj.dial
	if sj.rank == 0 && srv == nil {
		srv, err = bootstrap.NewServer(bootstrap.ServerConfig{Addr: sj.listen, Size: sj.size, Secret: sj.secret, JobID: sj.jobID, Logger: lg, PeerTimeout: liveness})
		if err != nil {
			return fmt.Errorf("rank 0 on %s (%s): serve the bootstrap: %w%s", host, sj.launcher, err, sj.portHint)
		}
	}
	if srv != nil {
		_, port, _ := net.SplitHostPort(srv.Addr())
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ss := &servedStore{srv: srv, barrier: sj.barrier, finish: sj.finish}
	store, err := bootstrap.Dial(ctx, bootstrap.DialConfig{
		Addr: addr, Rank: sj.rank, Size: sj.size, Secret: sj.secret, JobID: sj.jobID, Host: host,
		Logger: ss.quietWhenLeaving(env, host, sj.rank), PeerTimeout: liveness,
	})
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return fmt.Errorf("rank %d on %s (%s): join bootstrap at %s: %w%s", sj.rank, host, sj.launcher, addr, err, sj.secretHint)
	}
	ss.Store = store
	if err := build(ctx, ss, Options{Env: env, Host: host, Logger: lg, JobID: sj.jobID, Secret: sj.secret}); err != nil {
		ss.barrier, ss.finish = nil, nil // collective (MPI): not after a failure
		ss.Close()
		return err
	}
	return nil
}

// servedStore is a rank's store in a servedJob. Rank 0 serves the
// bootstrap, so it must not stop serving while another rank still needs
// the server to say goodbye. With an outside barrier (MPI) every rank says
// goodbye, meets in the barrier, and then rank 0 stops the server. Without
// one (srun), every other rank puts a "leaving" key just before its
// goodbye and rank 0 waits for all of them (at most leaveTimeout); a rank
// whose goodbye then loses the race with the server's end does not report
// the server lost, since it announced that it was leaving.
type servedStore struct {
	bootstrap.Store
	srv     *bootstrap.Server // rank 0 only
	barrier func()
	finish  func()
	leaving atomic.Bool
}

func leaveKey(rank int) string { return "github.com/flexlink/flexlink/leaving/" + strconv.Itoa(rank) }

// Close leaves the job, then (rank 0) stops the server, then runs finish.
func (s *servedStore) Close() error {
	s.leaving.Store(true)
	if s.barrier == nil {
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		if s.srv == nil {
			_ = s.Put(ctx, leaveKey(s.Rank()), []byte{1})
		} else {
			for r := 1; r < s.Size() && ctx.Err() == nil; r++ {
				_, _ = s.Get(ctx, leaveKey(r))
			}
		}
		cancel()
	}
	err := s.Store.Close()
	if s.barrier != nil {
		s.barrier()
	}
	if s.srv != nil {
		s.srv.Close()
	}
	if s.finish != nil {
		s.finish()
	}
	return err
}

// quietWhenLeaving is the bootstrap client's logger: NewLogger's, minus
// the "lost bootstrap server" error once this rank has announced that it
// is leaving.
func (s *servedStore) quietWhenLeaving(env settings.Env, host string, rank int) hclog.Logger {
	return newLogger(env, host, rank, func(_ hclog.Level, msg string, _ ...any) bool {
		return s.leaving.Load() && msg == "lost bootstrap server"
	})
}
