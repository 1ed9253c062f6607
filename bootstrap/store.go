// Package bootstrap is the rendezvous every job starts with: an authenticated
// TCP store (served by flexrun, or by rank 0 under srun/mpirun) that moves
// opaque bytes only. Ranks publish their link addresses through it and read
// their peers'; it also carries barriers, aborts, and the news that a rank
// is gone. It knows nothing about transports.
package bootstrap

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Store is one rank's handle on the job's rendezvous.
//
// Matching: the k-th AllGather (Broadcast, Barrier) call of every rank is
// one operation; all ranks must make the same sequence of these calls.
// Put/Get are by key: Get blocks until some rank Puts the key (keys are
// write-once; a second Put of a key with different bytes is an error).
//
// Failure: when a rank's connection drops before it called Close (its
// goodbye), every other rank's pending and later calls fail within 2 s with
// an error wrapping errs.ErrPeerLost that names the lost rank and its host.
// Abort(err) delivers err to every rank: their pending and later calls fail
// with an error wrapping the same sentinel as err (errs.ErrMismatch,
// errs.ErrPeerLost, errs.ErrTimeout, otherwise errs.ErrAborted) and carrying
// err's text and the aborting rank. Done is closed when either happens, and
// Err then returns that error. Every call honours ctx.
//
// Returned slices are owned by the caller. Methods are safe for concurrent
// use, but collective calls (AllGather, Broadcast, Barrier) must be issued in
// the same order on every rank.
type Store interface {
	Rank() int
	Size() int
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
	Broadcast(ctx context.Context, root int, data []byte) ([]byte, error)
	Barrier(ctx context.Context) error
	Put(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	Abort(err error) error
	Done() <-chan struct{}
	Err() error
	// Close says goodbye: this rank leaves normally, and its departure is not
	// reported as a loss. Pending calls fail with errs.ErrClosed.
	Close() error
}

// ServerConfig configures the store's server.
type ServerConfig struct {
	Addr   string // listen address, e.g. "127.0.0.1:0" or ":29400"
	Size   int    // number of ranks in the job
	Secret []byte // per-job secret; joining needs an HMAC proof of it
	JobID  string
	// HandshakeTimeout bounds a connection's time from accept to a valid
	// proof (default 10 s); a silent connection is dropped after it.
	HandshakeTimeout time.Duration
	Logger           hclog.Logger // nil: discard
}

// DialConfig configures one rank's connection.
type DialConfig struct {
	Addr   string // host:port of the server
	Rank   int
	Size   int
	Secret []byte
	JobID  string
	Host   string // this rank's host name, reported in errors about it
	Logger hclog.Logger
}
