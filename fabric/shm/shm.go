// Package shm links ranks on one host through shared memory.
//
// Each pair shares one anonymous memfd segment holding a lock-free
// single-producer/single-consumer ring per direction (FLEXLINK_SHM_RING_BYTES
// each). Messages stream through the rings in chunks, so a message larger
// than the ring flows while the receiver copies out behind the sender.
// Where it pays (FLEXLINK_SHM_CMA_BYTES, cma.go), a large message instead
// sends only a frame with its address, and the receiver pulls it straight
// from the sender's memory with process_vm_readv: one copy instead of two.
// A waiting side spins briefly (not at all when the host runs as many ranks
// as it has cores: the spinner would hold the core its peer needs), then
// sleeps on a futex in the shared page and checks at least every 200 ms
// that the peer process lives.
//
// Connecting: every endpoint listens on an abstract unix socket with a
// random name (its Address); the lower rank of a pair dials the higher, both
// prove they hold the job secret (auth.Proof), and the dialer passes the memfd;
// a connection that does not is dropped with one rate-limited WARN.
// The segment never has a name in /dev/shm, so nothing is left behind when
// a process dies; the socket stays open and tells each side at once when
// the other goes away.
package shm

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/internal/lobby"
	"github.com/flexlink/flexlink/internal/auth"
	"github.com/flexlink/flexlink/internal/errs"
)

const (
	addrMagic = "flexlink-shm/2"
	// handshakeTimeout bounds an accepted connection's time to prove itself.
	handshakeTimeout = 10 * time.Second
)

// accepted is a dialer that proved itself and whose segment is mapped,
// waiting for this rank's Connect.
type accepted struct {
	conn *net.UnixConn
	seg  *segment
	pid  int
	cma  cmaConfig
}

func (a *accepted) release() {
	a.conn.Close()
	a.seg.unmap()
}

type endpoint struct {
	cfg       fabric.EndpointConfig
	log       hclog.Logger
	ringBytes uint64
	spin      time.Duration // how long a waiting side polls before it sleeps
	cma       cmaPolicy
	hostKey   string // boot id and network namespace: equal only on one host
	name      string // abstract socket name, without the leading '@'
	ln        *net.UnixListener
	lb        *lobby.Lobby[*net.UnixConn, *accepted]
	drops     *auth.Drops // connections that did not prove the secret (one WARN a minute)
}

// NewEndpoint starts listening for this rank's shared-memory links.
func NewEndpoint(cfg fabric.EndpointConfig) (fabric.Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ring, err := cfg.Settings().Int("FLEXLINK_SHM_RING_BYTES")
	if err != nil {
		return nil, err
	}
	if err := checkRingBytes(uint64(ring)); err != nil {
		return nil, fmt.Errorf("FLEXLINK_SHM_RING_BYTES: %w", err)
	}
	cma, measure := autoCMABytes, measureFunc(measureCMA)
	if v := cfg.Settings().String("FLEXLINK_SHM_CMA_BYTES"); v != "auto" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("FLEXLINK_SHM_CMA_BYTES=%q: want auto, 0 (off) or a size in bytes", v)
		}
		cma, measure = n, nil
	}
	local, err := cfg.Settings().Int("FLEXLINK_LOCAL_SIZE")
	if err != nil {
		return nil, err
	}
	var rnd [12]byte
	rand.Read(rnd[:])
	e := &endpoint{
		cfg: cfg, log: cfg.Log().Named("shm"), ringBytes: uint64(ring), hostKey: hostKey(),
		cma:  cmaPolicy{bytes: cma, readv: processRead, measure: measure, oversub: oversubscribed(local, runtime.NumCPU())},
		spin: spinBudget(local, runtime.NumCPU()),
		name: fmt.Sprintf("flexlink-%s-%x", sanitize(cfg.JobID, 40), rnd),
		lb:   lobby.New[*net.UnixConn, *accepted](),
	}
	e.drops = &auth.Drops{Log: e.log, What: fmt.Sprintf("shm socket @%s of rank %d on %s", e.name, cfg.Rank, cfg.Host)}
	e.ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + e.name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("rank %d: listen on shm socket @%s: %w", cfg.Rank, e.name, err)
	}
	e.acceptLoop()
	return e, nil
}

func (e *endpoint) Kind() fabric.Kind { return fabric.KindShm }

// Address is "flexlink-shm/2 <host key> <socket name>".
func (e *endpoint) Address() []byte {
	return []byte(addrMagic + " " + e.hostKey + " " + e.name)
}

// Connect makes the link to peer. The lower rank dials the higher one's
// socket; the higher rank waits for that dial. Both return once both have
// called Connect (or ctx ends).
func (e *endpoint) Connect(ctx context.Context, peer int, peerAddress []byte) (fabric.Link, error) {
	if err := e.cfg.CheckPeer(peer); err != nil {
		return nil, err
	}
	f := strings.Fields(string(peerAddress))
	if len(f) != 3 || f[0] != addrMagic {
		return nil, fmt.Errorf("connect rank %d to rank %d over shm: bad address %q", e.cfg.Rank, peer, peerAddress)
	}
	if f[1] != e.hostKey {
		return nil, fmt.Errorf("connect rank %d to rank %d over shm: peer is on another host or network namespace: %w",
			e.cfg.Rank, peer, errs.ErrNotSupported)
	}
	if err := e.lb.Claim(peer, fmt.Sprintf("connect rank %d to rank %d over shm", e.cfg.Rank, peer)); err != nil {
		return nil, err
	}
	var l fabric.Link
	var err error
	if e.cfg.Rank < peer {
		l, err = e.dial(ctx, peer, f[2])
	} else {
		l, err = e.await(ctx, peer)
	}
	if err != nil {
		return nil, fmt.Errorf("connect rank %d to rank %d over shm (host %s): %w", e.cfg.Rank, peer, e.cfg.Host, err)
	}
	e.log.Debug("connected", "rank", e.cfg.Rank, "peer", peer, "link", l.Props().Desc)
	return l, nil
}

// Close stops listening and drops dialers no Connect took. Links stay.
func (e *endpoint) Close() error { return e.lb.Close(e.ln, (*accepted).release) }

// await waits for peer's dial, then confirms it (M4) and makes the link.
func (e *endpoint) await(ctx context.Context, peer int) (fabric.Link, error) {
	a, err := e.lb.Await(ctx, peer, func(*accepted) bool { return true })
	if err != nil {
		return nil, err
	}
	return e.confirm(ctx, peer, a)
}

func (e *endpoint) confirm(ctx context.Context, peer int, a *accepted) (fabric.Link, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handshakeTimeout)
	}
	a.conn.SetDeadline(deadline)
	if _, err := a.conn.Write([]byte{0, boolByte(a.cma.recv)}); err != nil {
		a.release()
		return nil, fmt.Errorf("confirm to rank %d (pid %d): %w: %w", peer, a.pid, err, errs.ErrPeerLost)
	}
	a.conn.SetDeadline(time.Time{})
	return newLink(linkConfig{who: peerID{rank: peer, pid: a.pid, host: e.cfg.Host}, side: 1, seg: a.seg, ctl: a.conn, log: e.log,
		cma: a.cma, spin: e.spin}), nil
}

// spinBudget is how long a waiting side polls before it sleeps on the
// futex. Polling pays when the side it waits for runs on another core; when
// the host has at least as many ranks as cores (localRanks, from the
// launcher; 0 when unknown), the poller takes the very CPU that the other
// side needs to produce, so it sleeps at once instead.
func spinBudget(localRanks, cpus int) time.Duration {
	if oversubscribed(localRanks, cpus) {
		return 0
	}
	return spinFor
}

func hostKey() string {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		h, _ := os.Hostname()
		id = []byte(h)
	}
	ns, _ := os.Readlink("/proc/self/ns/net")
	return sanitize(strings.TrimSpace(string(id))+"/"+ns, 80)
}

// sanitize keeps the characters that are safe in names and addresses.
func sanitize(s string, max int) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) > max {
		b = b[:max]
	}
	return string(b)
}
