package comm

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/internal/settings"
)

// world is what every communicator of one process shares: the bootstrap
// store, settings, logger and the job's host map. It is not a god-struct:
// communicators hold their own links and engines.
type world struct {
	store bootstrap.Store
	env   settings.Env
	log   hclog.Logger
	jobInfo
	linkConfig
	net *netState

	mu    sync.Mutex
	comms map[*Comm]struct{}
	lost  map[int]bootstrap.Loss // world ranks lost, with a store that keeps going (fate.go)
}

// jobInfo is who is in the job: this rank's host, the job's id and secret,
// and every world rank's host and pid (filled by New's exchange).
type jobInfo struct {
	host   string
	jobID  string
	secret []byte
	hosts  []string // world rank -> host name
	pids   []int    // world rank -> pid
}

// linkConfig is the settings the link set reads, read once at New.
type linkConfig struct {
	mode  string // FLEXLINK_TRANSPORT
	links string // FLEXLINK_LINKS
	// A collective's default deadline (FLEXLINK_TIMEOUT) and how long
	// dialing a peer's link may take (FLEXLINK_BOOTSTRAP_TIMEOUT).
	callTimeout, dialTimeout time.Duration
	// The tail of a message over several network links
	// (FLEXLINK_NET_TAIL, multilink.Options.Tail).
	netTail float64
}

// watch aborts every communicator's links when the bootstrap reports a lost
// rank or an abort, so no collective waits on a peer that is gone.
func (w *world) watch() {
	<-w.store.Done()
	err := w.store.Err()
	w.mu.Lock()
	comms := make([]*Comm, 0, len(w.comms))
	for c := range w.comms {
		comms = append(comms, c)
	}
	w.mu.Unlock()
	for _, c := range comms {
		if errors.Is(err, bootstrap.ErrServerLost) {
			go c.endAfterCall(err, serverLostGrace)
			continue
		}
		c.end(err)
	}
}

// serverLostGrace bounds how long a collective in flight when the
// bootstrap server or a member was lost may go on before its communicator
// ends.
const serverLostGrace = 2 * time.Second

// endAfterCall ends c with err once the call it is making (if any) has
// returned, or after grace; a call that fails meanwhile ends c with err at
// once (Run: it is the root cause). The server's loss says nothing of the members
// (flexlink's libnccl serves the store from rank 0's process, which a
// script may end right after its last collective while the others still
// take in that collective's data, already on their links): a member that
// is really gone fails the call through its link at once, and a member
// stuck elsewhere is ended by the grace.
func (c *Comm) endAfterCall(err error, grace time.Duration) {
	c.fate.hold(err)
	idle := make(chan struct{})
	go func() {
		c.opMu.Lock()
		c.opMu.Unlock() // (only waits for the call in flight)
		close(idle)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
	c.end(c.fate.held()) // the first end held back: two news of one loss end alike
}

// register adds c to the communicators the world ends on news, and
// returns the loss of one of its members when one is already lost.
func (w *world) register(c *Comm) (bootstrap.Loss, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.comms == nil {
		w.comms = map[*Comm]struct{}{}
	}
	w.comms[c] = struct{}{}
	return w.lostMember(c.members)
}

func (w *world) unregister(c *Comm) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.comms, c)
}

// endpoints holds one communicator's endpoints, by link kind (see package
// fabric/transports).
type endpoints map[string]fabric.Endpoint

// netState is the process's network transport: the provider is opened the
// first time a communicator has a member on another host (or
// FLEXLINK_TRANSPORT=net), and closed with the world. devs are the device
// indices this rank opens endpoints on (transports.SelectDevices: with PXN
// its own NICs as the topology planner assigns them), rails
// every world rank's published rails (filled by New's exchange).
type netState struct {
	cfg   transports.NetConfig
	mu    sync.Mutex
	p     net.Provider
	err   error
	devs  []int
	rails [][]transports.Rail
}

// provider opens (once) and returns the network provider and the devices
// this rank uses.
func (w *world) provider() (net.Provider, []int, error) {
	n := w.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil && n.err == nil {
		n.p, n.err = transports.OpenNet(n.cfg, w.env, w.log)
		if n.err == nil {
			own, err := transports.OwnOf(n.cfg, w.env, w.host, w.localRank())
			if err != nil {
				w.log.Info("PXN: own NIC by local rank, not by the topology", "why", err)
			}
			n.devs, n.err = transports.SelectDevices(n.p.Devices(), n.cfg.Devices, own)
		}
		if n.err != nil {
			n.err = fmt.Errorf("rank %d on %s: network transport: %w", w.store.Rank(), w.host, n.err)
		}
	}
	if n.err != nil {
		return nil, nil, n.err
	}
	if len(n.devs) == 0 {
		return nil, nil, fmt.Errorf("rank %d on %s: the network transport found no NIC (FLEXLINK_NET_IFNAME=%q)", w.store.Rank(), w.host, n.cfg.IfName)
	}
	return n.p, n.devs, nil
}

// myRails describes this rank's network endpoints for the exchange.
func (w *world) myRails() []transports.Rail {
	p, devs, err := w.provider()
	if err != nil {
		return nil
	}
	return transports.Rails(p.Devices(), devs)
}

// localRank is this rank's index among the ranks of its host, from the
// exchanged host map, or FLEXLINK_LOCAL_RANK before it (0 unset).
func (w *world) localRank() int {
	if w.hosts != nil {
		n := 0
		for r := 0; r < w.store.Rank(); r++ {
			if w.hosts[r] == w.host {
				n++
			}
		}
		return n
	}
	n, err := w.env.Int("FLEXLINK_LOCAL_RANK")
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// closeNet closes the provider, if it was opened.
func (w *world) closeNet() {
	w.net.mu.Lock()
	defer w.net.mu.Unlock()
	if w.net.p != nil {
		w.net.p.Close()
		w.net.p = nil
	}
}

// newEndpoints opens the endpoints FLEXLINK_TRANSPORT allows for the
// communicator named comm; the network transport's only when withNet.
func (w *world) newEndpoints(comm string, withNet bool) (endpoints, error) {
	cfg := fabric.EndpointConfig{
		Rank: w.store.Rank(), Size: w.store.Size(), JobID: w.jobID, Secret: w.secret,
		Host: w.host, Comm: comm, Logger: w.log, Env: w.env,
	}
	var p net.Provider
	var devs []int
	if withNet {
		var err error
		if p, devs, err = w.provider(); err != nil {
			return nil, err
		}
	}
	eps, err := transports.Open(w.mode, w.links, cfg, p, devs)
	if err != nil {
		return nil, err
	}
	return endpoints(eps), nil
}

// needsNet says whether a communicator of these world ranks uses the
// network transport: FLEXLINK_TRANSPORT=net, or auto with a member on
// another host.
func (w *world) needsNet(members []int) bool {
	switch w.mode {
	case transports.ModeNet:
		return true
	case transports.ModeAuto:
		for _, m := range members {
			if w.hosts[m] != w.host {
				return true
			}
		}
	}
	return false
}

func (e endpoints) addresses() map[string][]byte {
	m := map[string][]byte{}
	for k, ep := range e {
		m[k] = ep.Address()
	}
	return m
}

func (e endpoints) close() { transports.Close(e) }

// linkKinds lists the link kinds between this rank and a peer whose
// published addresses are peerAddrs (fabric/transports.Kinds): one kind,
// or several (rails, or FLEXLINK_LINKS naming several host kinds), which
// then make a FlexLink multi-link channel. Rails pair by subnet
// (transports.PairRails) when both ranks published theirs.
func (w *world) linkKinds(mine endpoints, peerWorldRank int, peerAddrs map[string][]byte) ([]string, error) {
	count := func(m map[string]bool) int {
		n := 0
		for i := 0; i < 64; i++ {
			if m[transports.RailKind(i)] {
				n++
			}
		}
		return n
	}
	my, peer := map[string]bool{}, map[string]bool{}
	for k := range mine {
		my[k] = true
	}
	for k := range peerAddrs {
		peer[k] = true
	}
	var pairs []string
	if me := w.store.Rank(); w.net.rails != nil && len(w.net.rails[me]) > 0 && len(w.net.rails[peerWorldRank]) > 0 {
		lo, hi := w.net.rails[me], w.net.rails[peerWorldRank]
		if peerWorldRank < me {
			lo, hi = hi, lo
		}
		pairs = transports.PairRails(lo, hi, w.net.cfg.Rails)
	}
	kinds, err := transports.Kinds(transports.Pair{
		Mode: w.mode, SameHost: w.hosts[peerWorldRank] == w.host, Links: w.links,
		MyRails: count(my), PeerRails: count(peer), RailPairs: pairs,
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s to rank %d on %s: %w", w.store.Rank(), w.host, peerWorldRank, w.hosts[peerWorldRank], err)
	}
	return kinds, nil
}
