package netlink

import (
	"fmt"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net/tcp"
)

// nominalTCP is the bandwidth a host TCP link claims where the interface
// reports no speed (loopback, veth): 10 Gbit/s.
const nominalTCP = 1.25e9

// NewTCPEndpoint is the host TCP link (link kind "tcp", FLEXLINK_TRANSPORT=tcp
// or FLEXLINK_LINKS naming tcp): an Endpoint over a tcp provider of its own
// on the first interface FLEXLINK_SOCKET_IFNAME allows (the first
// non-loopback one, else loopback), with FLEXLINK_SOCKETS_PER_PEER sockets
// per direction and FLEXLINK_SOCKET_TIMEOUT as the silence limit, listening
// on FLEXLINK_PORT_RANGE's first free port (ephemeral when unset). Peers
// prove the job secret in their hello. The provider needs no Close of its
// own: closing the endpoint and its links releases everything it holds.
func NewTCPEndpoint(cfg fabric.EndpointConfig) (*Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	env := cfg.Settings()
	socks, err := env.Int("FLEXLINK_SOCKETS_PER_PEER")
	if err != nil {
		return nil, err
	}
	if socks < 1 || socks > 16 {
		return nil, fmt.Errorf("FLEXLINK_SOCKETS_PER_PEER=%d: want 1 to 16", socks)
	}
	timeout, err := env.Duration("FLEXLINK_SOCKET_TIMEOUT")
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("FLEXLINK_SOCKET_TIMEOUT=%v: want a positive duration", timeout)
	}
	pr, err := env.Ports()
	if err != nil {
		return nil, err
	}
	spec := env.String("FLEXLINK_SOCKET_IFNAME")
	log := cfg.Log().Named("tcp")
	p, err := tcp.New(tcp.Options{IfName: spec, Sockets: socks, Timeout: timeout, Logger: log, Ports: pr})
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s: FLEXLINK_SOCKET_IFNAME=%q: %w", cfg.Rank, cfg.Host, spec, err)
	}
	return Open(p, 0, Config{
		Rank: cfg.Rank, Host: cfg.Host, Secret: cfg.Secret, JobID: cfg.JobID, Comm: cfg.Comm,
		Kind: fabric.KindTCP, Bandwidth: nominalTCP, Latency: 30 * time.Microsecond, Logger: log,
	})
}
