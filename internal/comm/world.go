package comm

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"flexlink/bootstrap"
	"flexlink/fabric"
	"flexlink/fabric/shm"
	"flexlink/fabric/tcp"
	"flexlink/internal/settings"
)

// world is what every communicator of one process shares: the bootstrap
// store, settings, logger and the job's host map. It is not a god-struct:
// communicators hold their own links and engines.
type world struct {
	store  bootstrap.Store
	env    settings.Env
	host   string
	log    hclog.Logger
	jobID  string
	secret []byte
	hosts  []string // world rank -> host name
	pids   []int    // world rank -> pid

	mu    sync.Mutex
	comms map[*Comm]struct{}
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
		c.links.abort(err)
	}
}

func (w *world) register(c *Comm) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.comms == nil {
		w.comms = map[*Comm]struct{}{}
	}
	w.comms[c] = struct{}{}
}

func (w *world) unregister(c *Comm) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.comms, c)
}

// endpoints holds one communicator's endpoints, one per host transport.
type endpoints map[string]fabric.Endpoint

// newEndpoints opens the transports FLEXLINK_TRANSPORT allows for the
// communicator named comm.
func (w *world) newEndpoints(comm string) (endpoints, error) {
	mode := w.env.String("FLEXLINK_TRANSPORT")
	cfg := fabric.EndpointConfig{
		Rank: w.store.Rank(), Size: w.store.Size(), JobID: w.jobID, Secret: w.secret,
		Host: w.host, Comm: comm, Logger: w.log,
	}
	eps := endpoints{}
	if mode == "auto" || mode == "shm" {
		ep, err := shm.NewEndpoint(cfg)
		if err != nil {
			return nil, fmt.Errorf("rank %d on %s: open shm endpoint: %w", cfg.Rank, w.host, err)
		}
		eps[string(fabric.KindShm)] = ep
	}
	if mode == "auto" || mode == "tcp" {
		ep, err := tcp.NewEndpoint(cfg)
		if err != nil {
			eps.close()
			return nil, fmt.Errorf("rank %d on %s: open tcp endpoint: %w", cfg.Rank, w.host, err)
		}
		eps[string(fabric.KindTCP)] = ep
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("FLEXLINK_TRANSPORT=%q: want auto, shm or tcp", mode)
	}
	return eps, nil
}

func (e endpoints) addresses() map[string][]byte {
	m := map[string][]byte{}
	for k, ep := range e {
		m[k] = ep.Address()
	}
	return m
}

func (e endpoints) close() {
	for _, ep := range e {
		ep.Close()
	}
}

// linkKinds lists the host transports to join this rank and a peer with.
// Normally one (kindFor); FLEXLINK_LINKS naming several host kinds (e.g.
// "shm,tcp") asks for all that can reach the peer, and the link is then a
// FlexLink multi-link channel that splits large messages across them.
func (w *world) linkKinds(peerWorldRank int) ([]string, error) {
	def, err := w.kindFor(peerWorldRank)
	if err != nil {
		return nil, err
	}
	if w.env.String("FLEXLINK_TRANSPORT") != "auto" {
		return []string{def}, nil
	}
	var kinds []string
	for _, k := range strings.Split(w.env.String("FLEXLINK_LINKS"), ",") {
		switch k = strings.TrimSpace(k); k {
		case string(fabric.KindShm):
			if w.hosts[peerWorldRank] == w.host && !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		case string(fabric.KindTCP):
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	if len(kinds) == 0 {
		return []string{def}, nil
	}
	slices.Sort(kinds) // both sides must list the links in the same order
	return kinds, nil
}

// kindFor picks the host transport between this rank and a peer: shm on one
// host, tcp across hosts (FLEXLINK_TRANSPORT forces one).
func (w *world) kindFor(peerWorldRank int) (string, error) {
	same := w.hosts[peerWorldRank] == w.host
	switch mode := w.env.String("FLEXLINK_TRANSPORT"); mode {
	case "shm":
		if !same {
			return "", fmt.Errorf("FLEXLINK_TRANSPORT=shm but rank %d is on %s, not %s", peerWorldRank, w.hosts[peerWorldRank], w.host)
		}
		return string(fabric.KindShm), nil
	case "tcp":
		return string(fabric.KindTCP), nil
	default:
		if same {
			return string(fabric.KindShm), nil
		}
		return string(fabric.KindTCP), nil
	}
}
