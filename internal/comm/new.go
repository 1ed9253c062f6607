package comm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/settings"
)

// Options: see rank.Options.
type Options = join.Options

// Init: see rank.Init (package join says how each launcher is joined).
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
	Addrs map[string][]byte `json:"addrs"`           // transport kind -> endpoint address of the world comm
	Rails []transports.Rail `json:"rails,omitempty"` // the network endpoints' devices and subnets
}

// New: see rank.New.
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
	// Every FLEXLINK_* value is checked once, here, before anything uses it.
	if err := settings.Validate(opt.Env); err != nil {
		return nil, fmt.Errorf("rank %d on %s: %w", store.Rank(), opt.Host, err)
	}
	if store.Rank() == 0 {
		for _, w := range settings.Warnings(os.Environ()) {
			opt.Logger.Warn(w)
		}
		// NCCL_* variables flexlink neither maps nor honours: one INFO
		// line each, once per process (settings/nccl.go).
		for _, n := range settings.NCCLNotesOnce(os.Environ()) {
			opt.Logger.Info(n)
		}
	}
	mode := opt.Env.String("FLEXLINK_TRANSPORT")
	if err := transports.CheckMode(mode); err != nil {
		return nil, err
	}
	netCfg, err := transports.ReadNetConfig(opt.Env)
	if err != nil {
		return nil, err
	}
	callTimeout, err := opt.Env.Duration("FLEXLINK_TIMEOUT")
	if err != nil {
		return nil, err
	}
	dialTimeout, err := opt.Env.Duration("FLEXLINK_BOOTSTRAP_TIMEOUT")
	if err != nil {
		return nil, err
	}
	netTail, err := opt.Env.Float("FLEXLINK_NET_TAIL")
	if err != nil {
		return nil, err
	}
	w := &world{store: store, env: opt.Env, log: opt.Logger, net: &netState{cfg: netCfg},
		jobInfo: jobInfo{host: opt.Host, jobID: opt.JobID, secret: opt.Secret},
		linkConfig: linkConfig{mode: mode, links: opt.Env.String("FLEXLINK_LINKS"), callTimeout: callTimeout, dialTimeout: dialTimeout,
			netTail: netTail}}
	// Round one: hosts, pids and the addresses of the host transports. The
	// network transport is opened only when the job spans hosts (or
	// FLEXLINK_TRANSPORT=net), and its addresses follow in round two.
	eps, err := w.newEndpoints("w", mode == transports.ModeNet)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Comm, error) {
		eps.close()
		w.closeNet()
		return nil, err
	}
	me := peerInfo{Host: opt.Host, Pid: os.Getpid(), Addrs: eps.addresses()}
	if mode == transports.ModeNet {
		me.Rails = w.myRails()
	}
	infos, err := exchangeInfo(ctx, store, me)
	if err != nil {
		return fail(err)
	}
	w.net.rails = railsOf(infos)
	w.hosts = make([]string, len(infos))
	w.pids = make([]int, len(infos))
	for i, in := range infos {
		w.hosts[i], w.pids[i] = in.Host, in.Pid
	}
	members := make([]int, len(infos))
	for i := range members {
		members[i] = i
	}
	if mode == transports.ModeAuto && w.needsNet(members) {
		if err := w.addNet(ctx, eps, infos); err != nil {
			return fail(err)
		}
	}
	addrOf := func(_ context.Context, peer int) (map[string][]byte, error) {
		return infos[peer].Addrs, nil
	}
	c, err := newComm(w, "w", members, store.Rank(), eps, addrOf)
	if err != nil {
		w.closeNet()
		return nil, err
	}
	c.ownsWorld = true
	go w.watch()
	go w.watchLosses()
	if err := startPXNGroup(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// exchangeInfo all-gathers every rank's peerInfo.
func exchangeInfo(ctx context.Context, store bootstrap.Store, me peerInfo) ([]peerInfo, error) {
	blob, err := json.Marshal(me)
	if err != nil {
		return nil, err
	}
	all, err := store.AllGather(ctx, blob)
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s: exchange peer info: %w", store.Rank(), me.Host, err)
	}
	infos := make([]peerInfo, len(all))
	for i, b := range all {
		if err := json.Unmarshal(b, &infos[i]); err != nil {
			return nil, fmt.Errorf("rank %d: peer info of rank %d: %w", store.Rank(), i, err)
		}
	}
	return infos, nil
}

// addNet opens the world communicator's network endpoints (one per rail)
// into eps and all-gathers their addresses into infos: the second round of
// New, run by every rank when the job spans hosts.
func (w *world) addNet(ctx context.Context, eps endpoints, infos []peerInfo) error {
	p, devs, err := w.provider()
	if err != nil {
		return err
	}
	cfg := fabric.EndpointConfig{Rank: w.store.Rank(), Size: w.store.Size(), JobID: w.jobID, Secret: w.secret, Host: w.host, Comm: "w", Logger: w.log, Env: w.env}
	if err := transports.OpenRails(eps, cfg, p, devs); err != nil {
		return err
	}
	addrs := map[string][]byte{}
	for k, ep := range eps {
		if strings.HasPrefix(k, string(fabric.KindNet)) {
			addrs[k] = ep.Address()
		}
	}
	all, err := exchangeInfo(ctx, w.store, peerInfo{Host: w.host, Pid: os.Getpid(), Addrs: addrs, Rails: transports.Rails(p.Devices(), devs)})
	if err != nil {
		return err
	}
	w.net.rails = railsOf(all)
	for i := range infos {
		for k, a := range all[i].Addrs {
			infos[i].Addrs[k] = a
		}
	}
	return nil
}

// railsOf lists every rank's published rails (nil where none did).
func railsOf(infos []peerInfo) [][]transports.Rail {
	out := make([][]transports.Rail, len(infos))
	any := false
	for i, in := range infos {
		out[i] = in.Rails
		any = any || len(in.Rails) > 0
	}
	if !any {
		return nil
	}
	return out
}
