package fabric

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/settings"
)

// EndpointConfig is what every transport's NewEndpoint takes: who this rank
// is, which job and communicator the endpoint belongs to, and the job secret
// that peers must prove they hold before a link is made.
type EndpointConfig struct {
	Rank, Size int
	JobID      string
	// Secret is the per-job secret. Transports authenticate peers with an
	// HMAC of it and never send it. It must not be empty.
	Secret []byte
	// Host is this rank's host name, used in error messages and link
	// descriptions.
	Host string
	// Comm distinguishes the endpoints of different communicators of one
	// job, so that a connection meant for one is never paired with another.
	Comm string
	// Logger receives connection and failure events; nil discards them.
	Logger hclog.Logger
	// Env reads FLEXLINK_* settings (ring sizes, interfaces, sockets per
	// peer); nil reads the process environment.
	Env settings.Env
}

// Validate reports a configuration that no transport can use.
func (c EndpointConfig) Validate() error {
	switch {
	case c.Size < 1:
		return fmt.Errorf("endpoint config: size %d < 1", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("endpoint config: rank %d outside [0,%d)", c.Rank, c.Size)
	case len(c.Secret) == 0:
		return errors.New("endpoint config: empty job secret")
	case len(c.JobID) > 255 || len(c.Comm) > 255:
		return errors.New("endpoint config: job id or communicator id longer than 255 bytes")
	}
	return nil
}

// Log returns the configured logger, or one that discards everything.
func (c EndpointConfig) Log() hclog.Logger {
	if c.Logger == nil {
		return hclog.NewNullLogger()
	}
	return c.Logger
}

// Settings returns the configured settings reader, or the process
// environment's.
func (c EndpointConfig) Settings() settings.Env {
	if c.Env == nil {
		return settings.OS()
	}
	return c.Env
}

// CheckPeer reports a peer rank that cannot be connected to from this
// endpoint (out of range, or this rank itself).
func (c EndpointConfig) CheckPeer(peer int) error {
	if peer < 0 || peer >= c.Size || peer == c.Rank {
		return fmt.Errorf("connect rank %d to rank %d: invalid peer (size %d)", c.Rank, peer, c.Size)
	}
	return nil
}
