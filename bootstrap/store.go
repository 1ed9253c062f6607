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

	"github.com/flexlink/flexlink/internal/ports"
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
// an error wrapping errs.ErrPeerLost that names the lost rank and its host
// (a rank silent for PeerTimeout counts as dropped); when the server is
// lost, the error names the server's address. Abort(err) delivers err to
// every rank: their pending and later calls fail with an error wrapping the
// same sentinel as err (errs.ErrMismatch, errs.ErrPeerLost, errs.ErrTimeout,
// otherwise errs.ErrAborted; always errs.ErrAborted too) and carrying err's
// text and the aborting rank (or "the launcher", for Server.Abort). Done is closed when either happens (or
// on Close), and Err then returns that error. Every call honours ctx: when
// ctx ends first the call fails with ctx's error (wrapping errs.ErrTimeout
// too when its deadline passed); a collective abandoned that way has still
// been contributed, so the sequence stays aligned across ranks.
//
// Returned slices are owned by the caller; input slices may be reused as
// soon as a call returns. Methods are safe for concurrent use, but
// collective calls (AllGather, Broadcast, Barrier) must be issued in the
// same order on every rank: ranks whose k-th calls differ (kind or root)
// fail the job with errs.ErrMismatch. A collective that needs a rank which
// has said goodbye fails with errs.ErrClosed naming it. Payloads are bounded
// by MaxFrameSize (an AllGather's result, all ranks' data together, too).
type Store interface {
	Rank() int
	Size() int
	// AllGather returns every rank's data, indexed by rank.
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
	// Broadcast returns root's data on every rank (others' data is ignored).
	Broadcast(ctx context.Context, root int, data []byte) ([]byte, error)
	// Barrier returns once every rank has called it.
	Barrier(ctx context.Context) error
	// Put returns once the store holds value under key.
	Put(ctx context.Context, key string, value []byte) error
	// Get blocks until key has a value and returns it.
	Get(ctx context.Context, key string) ([]byte, error)
	// Abort fails the job for every rank (this one at once) and returns
	// once the abort has left this process, or an error if it could not.
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
	// Ports, when Addr's port is 0, is where the port comes from: the
	// first free one of the range, in order (FLEXLINK_PORT_RANGE); the
	// zero Range: an ephemeral port. An Addr with a port of its own
	// listens there.
	Ports ports.Range
	// HandshakeTimeout bounds a connection's time from accept to a valid
	// proof (default 10 s); a silent connection is dropped after it.
	HandshakeTimeout time.Duration
	// PeerTimeout is how long a joined rank may stay silent (no byte, not
	// even a heartbeat) before it is declared lost (default 1.5 s).
	// Heartbeats go out every PeerTimeout/4, at most every 400 ms.
	PeerTimeout time.Duration
	// KeepOnLoss keeps the job going when a rank is lost: instead of every
	// rank's calls failing, only collectives that need the lost rank fail
	// (errs.ErrPeerLost naming it), Put and Get go on serving the others,
	// and the loss is published as a record (NextLoss). NCCL's model, where
	// a dead rank fails the communicators that hold it and the survivors
	// may make new ones (ncclCommShrink).
	KeepOnLoss bool
	Logger     hclog.Logger // nil: discard
	// OnEvent, when set, is told what the server sees happen to the job
	// (Event): joins, goodbyes, losses, refusals, puts, the failure. It is
	// called from the server's goroutines, some under its lock: it must
	// not block and must not call the server.
	OnEvent func(Event)
	// Transient, when set, picks the connections that join as transient
	// members by the host name they give (DialConfig.Host): a process
	// that joins only to put a few keys and leave (flexlink's libnccl
	// reporting to flexrun). A transient member takes part in no
	// collective; it may join again after its goodbye or its loss (a new
	// join replaces its session still open); and its loss (the
	// connection ends before its goodbye, or it sends what is not a
	// message) ends only its own session, told as EventLost, as does its
	// Abort: the job and the other members' calls go on. nil: none.
	Transient func(host string) bool
}

// DialConfig configures one rank's connection.
type DialConfig struct {
	Addr   string // host:port of the server
	Rank   int
	Size   int
	Secret []byte
	JobID  string
	Host   string // this rank's host name, reported in errors about it (default: os.Hostname)
	// PeerTimeout is how long the server may stay silent before this rank
	// declares it lost (default 1.5 s); see ServerConfig.PeerTimeout.
	PeerTimeout time.Duration
	Logger      hclog.Logger // nil: discard
}
