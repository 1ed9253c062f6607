package comm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"flexlink/bootstrap"
	"flexlink/internal/comm/join"
	"flexlink/internal/settings"
)

// Options configure New. Zero values mean "from the environment".
type Options = join.Options

// Init joins the job the process was launched into (see package join) and
// builds its world communicator.
func Init(ctx context.Context) (*Comm, error) {
	var c *Comm
	err := join.Init(ctx, func(ctx context.Context, store bootstrap.Store, opt Options) error {
		var err error
		c, err = New(ctx, store, opt)
		return err
	})
	if err != nil {
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
		opt.Host = join.HostName(opt.Env)
	}
	if opt.Logger == nil {
		opt.Logger = join.NewLogger(opt.Env, opt.Host, store.Rank())
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
