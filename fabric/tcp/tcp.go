// Package tcp links ranks over TCP, for ranks on different hosts (or on
// one host when FLEXLINK_TRANSPORT=tcp).
//
// An endpoint listens on the interface that FLEXLINK_SOCKET_IFNAME picks.
// The lower rank of a pair dials FLEXLINK_SOCKETS_PER_PEER sockets to the
// higher; on each, both prove they hold the job secret (HMAC, both ways)
// and name their ranks, communicator and the listener's endpoint id, so
// that connections are never paired wrongly. Large messages are striped
// across the sockets. Heartbeats on idle sockets and read deadlines
// (FLEXLINK_SOCKET_TIMEOUT) catch a peer that vanished without closing; a
// dead process's sockets give end of file at once.
package tcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"flexlink/fabric"
	"flexlink/fabric/internal/lobby"
)

const (
	addrMagic = "flexlink-tcp/1"
	// handshakeTimeout bounds an accepted connection's time to prove itself.
	handshakeTimeout = 10 * time.Second
)

// address is what Address encodes: "flexlink-tcp/1 <id> <ip:port> <if> <host>".
type address struct {
	id                     [idBytes]byte
	hostPort, ifname, host string
}

func (a address) String() string {
	return fmt.Sprintf("%s %x %s %s %s", addrMagic, a.id, a.hostPort, a.ifname, a.host)
}

func parseAddress(b []byte) (address, error) {
	var a address
	f := strings.Fields(string(b))
	if len(f) != 5 || f[0] != addrMagic {
		return a, fmt.Errorf("bad tcp address %q", b)
	}
	id, err := hex.DecodeString(f[1])
	if err != nil || len(id) != idBytes {
		return a, fmt.Errorf("bad endpoint id in tcp address %q", b)
	}
	copy(a.id[:], id)
	a.hostPort, a.ifname, a.host = f[2], f[3], f[4]
	return a, nil
}

// arrival gathers the sockets a dialer opened to this endpoint until this
// rank's Connect takes them.
type arrival struct {
	conns []*net.TCPConn
	n     int
}

type endpoint struct {
	cfg     fabric.EndpointConfig
	log     hclog.Logger
	socks   int
	timeout time.Duration
	addr    address
	ln      *net.TCPListener
	lb      *lobby.Lobby[*net.TCPConn, *arrival]
}

// NewEndpoint listens for this rank's TCP links.
func NewEndpoint(cfg fabric.EndpointConfig) (fabric.Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	env := cfg.Settings()
	socks, err := env.Int("FLEXLINK_SOCKETS_PER_PEER")
	if err != nil {
		return nil, err
	}
	if socks < 1 || socks > maxSockets {
		return nil, fmt.Errorf("FLEXLINK_SOCKETS_PER_PEER=%d: want 1 to %d", socks, maxSockets)
	}
	timeout, err := env.Duration("FLEXLINK_SOCKET_TIMEOUT")
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("FLEXLINK_SOCKET_TIMEOUT=%v: want a positive duration", timeout)
	}
	ifs, err := systemIfaces()
	if err != nil {
		return nil, err
	}
	f, ip, err := chooseIface(env.String("FLEXLINK_SOCKET_IFNAME"), ifs)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	if err != nil {
		return nil, fmt.Errorf("rank %d: listen on %s (%s): %w", cfg.Rank, ip, f.name, err)
	}
	host := cfg.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	e := &endpoint{
		cfg: cfg, log: cfg.Log().Named("tcp"), socks: socks, timeout: timeout, ln: ln,
		addr: address{hostPort: ln.Addr().String(), ifname: f.name, host: strings.ReplaceAll(host, " ", "_")},
		lb:   lobby.New[*net.TCPConn, *arrival](),
	}
	rand.Read(e.addr.id[:])
	e.acceptLoop()
	return e, nil
}

func (e *endpoint) Kind() fabric.Kind { return fabric.KindTCP }

// Address is "flexlink-tcp/1 <endpoint id> <ip:port> <interface> <host>".
func (e *endpoint) Address() []byte { return []byte(e.addr.String()) }

// Connect makes the link to peer: the lower rank dials, the higher waits
// for its sockets. Both return once both have called Connect (or ctx ends).
func (e *endpoint) Connect(ctx context.Context, peer int, peerAddress []byte) (fabric.Link, error) {
	if err := e.cfg.CheckPeer(peer); err != nil {
		return nil, err
	}
	a, err := parseAddress(peerAddress)
	if err != nil {
		return nil, fmt.Errorf("connect rank %d to rank %d over tcp: %w", e.cfg.Rank, peer, err)
	}
	if err := e.lb.Claim(peer, fmt.Sprintf("connect rank %d to rank %d over tcp", e.cfg.Rank, peer)); err != nil {
		return nil, err
	}
	var conns []*net.TCPConn
	if e.cfg.Rank < peer {
		conns, err = e.dial(ctx, peer, a)
	} else {
		conns, err = e.await(ctx, peer)
	}
	if err != nil {
		return nil, fmt.Errorf("connect rank %d to rank %d (host %s, %s) over tcp: %w", e.cfg.Rank, peer, a.host, a.hostPort, err)
	}
	for _, c := range conns {
		tune(c, e.timeout)
	}
	bw := linkSpeed(e.addr.ifname)
	if bw == 0 {
		bw = 1.25e9
	}
	l := newLink(linkConfig{
		peer: peer, conns: conns, timeout: e.timeout, log: e.log,
		who: fmt.Sprintf("rank %d (host %s, %s)", peer, a.host, conns[0].RemoteAddr()),
		props: fabric.Props{
			Kind: fabric.KindTCP, Bandwidth: bw, Latency: 30 * time.Microsecond,
			Desc: fmt.Sprintf("tcp %s->%s (%s) x%d", conns[0].LocalAddr(), conns[0].RemoteAddr(), e.addr.ifname, len(conns)),
		},
	})
	e.log.Debug("connected", "rank", e.cfg.Rank, "peer", peer, "link", l.props.Desc)
	return l, nil
}

// tune sets the socket options every link socket gets: no Nagle delay,
// keepalive probes and a user timeout of the socket timeout, so even a
// blocked write to a vanished host ends.
func tune(c *net.TCPConn, timeout time.Duration) {
	c.SetNoDelay(true)
	c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: timeout / 2, Interval: timeout / 10, Count: 5})
	setUserTimeout(c, timeout)
}

// Close stops listening and drops sockets no Connect took. Links stay.
func (e *endpoint) Close() error {
	return e.lb.Close(e.ln, func(a *arrival) {
		for _, c := range a.conns {
			if c != nil {
				c.Close()
			}
		}
	})
}
