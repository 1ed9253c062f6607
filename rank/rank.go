// Package rank is the per-process runtime and the public API of flexlink:
// Init reads the launcher's environment and joins the job, and a Comm runs
// collectives among its ranks and splits into sub-communicators.
//
//	comm, err := rank.Init(ctx)
//	defer comm.Close()
//	err = comm.AllReduce(ctx, rank.Of(grads), rank.Of(grads), dtype.Sum)
package rank

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"flexlink/bootstrap"
	"flexlink/internal/settings"
)

// Options configure New. Zero values mean "from the environment".
type Options struct {
	Env    settings.Env // settings source; nil: the process environment
	Host   string       // this rank's host name; "": os.Hostname
	Logger hclog.Logger // nil: FLEXLINK_DEBUG-levelled stderr logger
	JobID  string       // names shared-memory segments; "": FLEXLINK_JOB_ID
	Secret []byte       // authenticates data links; nil: FLEXLINK_JOB_SECRET
}

// Init joins the job described by the environment that flexrun (or a
// compatible launcher) sets: FLEXLINK_RANK, FLEXLINK_WORLD_SIZE,
// FLEXLINK_BOOTSTRAP, FLEXLINK_JOB_ID, FLEXLINK_JOB_SECRET. With no launcher
// environment at all it returns a world of one rank (like MPI's singleton
// init). Started by srun or mpirun without flexrun, it joins through a
// bootstrap server that rank 0 runs (see docs/LAUNCH.md). It waits at
// most FLEXLINK_BOOTSTRAP_TIMEOUT for every rank to join.
func Init(ctx context.Context) (*Comm, error) {
	env := settings.OS()
	host := hostName(env)
	if !env.IsSet("FLEXLINK_RANK") {
		if _, ok := os.LookupEnv("OMPI_COMM_WORLD_RANK"); ok {
			return initMPI(ctx, env, os.LookupEnv, host)
		}
		if inSlurmStep(os.LookupEnv) {
			return initSlurm(ctx, env, os.LookupEnv, host)
		}
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("rank init: %w", err)
		}
		stores := bootstrap.NewInProc(1)
		return New(ctx, stores[0], Options{Env: env, Host: host, JobID: fmt.Sprintf("single-%d", os.Getpid()), Secret: secret})
	}
	r, err := env.Int("FLEXLINK_RANK")
	if err != nil {
		return nil, fmt.Errorf("rank init: %w", err)
	}
	n, err := env.Int("FLEXLINK_WORLD_SIZE")
	if err != nil {
		return nil, fmt.Errorf("rank init: %w", err)
	}
	if n < 1 || r < 0 || r >= n {
		return nil, fmt.Errorf("rank init: FLEXLINK_RANK=%d out of range for FLEXLINK_WORLD_SIZE=%d", r, n)
	}
	addr := env.String("FLEXLINK_BOOTSTRAP")
	if addr == "" {
		return nil, errors.New("rank init: FLEXLINK_BOOTSTRAP is not set (launch with flexrun)")
	}
	secret, err := hex.DecodeString(env.String("FLEXLINK_JOB_SECRET"))
	if err != nil || len(secret) == 0 {
		return nil, errors.New("rank init: FLEXLINK_JOB_SECRET is missing or not hex (launch with flexrun)")
	}
	timeout, err := env.Duration("FLEXLINK_BOOTSTRAP_TIMEOUT")
	if err != nil {
		return nil, fmt.Errorf("rank init: %w", err)
	}
	jobID := env.String("FLEXLINK_JOB_ID")
	lg := newLogger(env, host, r)
	dctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	store, err := bootstrap.Dial(dctx, bootstrap.DialConfig{
		Addr: addr, Rank: r, Size: n, Secret: secret, JobID: jobID, Host: host, Logger: lg,
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s: join bootstrap at %s: %w", r, host, addr, err)
	}
	c, err := New(dctx, store, Options{Env: env, Host: host, Logger: lg, JobID: jobID, Secret: secret})
	if err != nil {
		store.Close()
		return nil, err
	}
	return c, nil
}

// peerInfo is what every rank tells the others when the world forms.
type peerInfo struct {
	Host  string            `json:"host"`
	Pid   int               `json:"pid"`
	Addrs map[string][]byte `json:"addrs"` // transport kind -> endpoint address of the world comm
}

// New builds the world communicator of a job over an existing bootstrap
// store (Init does this for you; tests use it with bootstrap.NewInProc).
// Every rank of the store must call it.
func New(ctx context.Context, store bootstrap.Store, opt Options) (*Comm, error) {
	if opt.Env == nil {
		opt.Env = settings.OS()
	}
	if opt.Host == "" {
		opt.Host = hostName(opt.Env)
	}
	if opt.Logger == nil {
		opt.Logger = newLogger(opt.Env, opt.Host, store.Rank())
	}
	if opt.JobID == "" {
		opt.JobID = opt.Env.String("FLEXLINK_JOB_ID")
	}
	if opt.JobID == "" {
		opt.JobID = "job" + strconv.Itoa(os.Getpid())
	}
	w := &world{store: store, env: opt.Env, host: opt.Host, log: opt.Logger, jobID: opt.JobID, secret: opt.Secret}
	eps, err := w.newEndpoints("w")
	if err != nil {
		return nil, err
	}
	me := peerInfo{Host: opt.Host, Pid: os.Getpid(), Addrs: eps.addresses()}
	blob, err := json.Marshal(me)
	if err != nil {
		eps.close()
		return nil, err
	}
	all, err := store.AllGather(ctx, blob)
	if err != nil {
		eps.close()
		return nil, fmt.Errorf("rank %d on %s: exchange peer info: %w", store.Rank(), opt.Host, err)
	}
	infos := make([]peerInfo, len(all))
	for i, b := range all {
		if err := json.Unmarshal(b, &infos[i]); err != nil {
			eps.close()
			return nil, fmt.Errorf("rank %d: peer info of rank %d: %w", store.Rank(), i, err)
		}
	}
	w.hosts = make([]string, len(infos))
	w.pids = make([]int, len(infos))
	for i, in := range infos {
		w.hosts[i], w.pids[i] = in.Host, in.Pid
	}
	members := make([]int, len(infos))
	for i := range members {
		members[i] = i
	}
	addrOf := func(_ context.Context, peer int, kind string) ([]byte, error) {
		a, ok := infos[peer].Addrs[kind]
		if !ok {
			return nil, fmt.Errorf("rank %d on %s published no %s address", peer, infos[peer].Host, kind)
		}
		return a, nil
	}
	c, err := newComm(w, "w", members, store.Rank(), eps, addrOf)
	if err != nil {
		return nil, err
	}
	c.ownsWorld = true
	go w.watch()
	return c, nil
}
