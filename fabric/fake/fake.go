// Package fake is an in-memory fabric: every rank is a goroutine of one
// process and every Link is a pair of in-memory pipes. It is the default
// backend of protocol and collective tests (like raft's in-memory network
// or memberlist's MockNetwork): fast, seeded, and able to fail on demand.
//
// Behaviour, per direction of every pair of ranks:
//
//   - Rendezvous: a message moves when its send and the matching receive are
//     both posted; then its bytes are copied straight from the send buffer
//     into the receive buffer and both requests complete. Nothing is
//     buffered, so a protocol that only works on an eager transport
//     deadlocks here instead of in production.
//   - Matching is FIFO. The tag is checked before the length, so a message
//     whose tag and length both differ fails with *fabric.TagMismatchError.
//     A mismatched message is consumed: the send completes normally.
//   - Time: with Latency, Jitter or Bandwidth set, every message is given a
//     seeded arrival time (serialised on the wire at Bandwidth, then
//     Latency plus up to Jitter, never overtaking the message before it) and
//     real timers hold it until then. With all three zero nothing waits.
//   - Segments: with MaxSegment set, a matched message is copied in pieces
//     of at most MaxSegment bytes (each with its own arrival time when
//     time is modelled), so a failure can land in the middle of a message.
//   - Failure: Kill, FailLink, Abort and the links' own Abort and Close fail
//     pending and later requests; see each method for the errors.
package fake

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// Options shapes a Network. The zero value is an ideal network: no delay,
// unlimited bandwidth, whole messages.
type Options struct {
	// Seed makes jitter reproducible.
	Seed int64
	// Latency is added to every message (and every segment of it).
	Latency time.Duration
	// Jitter adds a seeded random delay in [0, Jitter) to every message.
	Jitter time.Duration
	// Bandwidth is in bytes per second per link direction; 0 is unlimited.
	Bandwidth float64
	// MaxSegment, when > 0, copies messages in pieces of at most this many
	// bytes.
	MaxSegment int
	// OnDeliver, when set, is called for every successfully delivered
	// message, with the ranks and the size, after its bytes are copied and
	// before its requests complete, from the goroutine that copied it and
	// with no lock held. Tests use it to inject a failure at a chosen
	// point of a protocol (for example Kill after the 40th message).
	OnDeliver func(from, to, n int)
}

// Network joins n ranks. Its methods are safe for concurrent use.
type Network struct {
	n     int
	opt   Options
	timed bool

	mu  sync.Mutex // guards rng
	rng *rand.Rand

	pipes []*pipe     // pipes[from*n+to] carries from -> to
	ends  []*endpoint // ends[from*n+to] is rank from's link to rank to
}

// NewNetwork makes a network of n ranks (n >= 1). It panics on n < 1 or a
// negative option, which are programming errors.
func NewNetwork(n int, opt Options) *Network {
	if n < 1 || opt.Latency < 0 || opt.Jitter < 0 || opt.Bandwidth < 0 || opt.MaxSegment < 0 {
		panic(fmt.Sprintf("fake.NewNetwork(%d, %+v): invalid arguments", n, opt))
	}
	nw := &Network{
		n:     n,
		opt:   opt,
		timed: opt.Latency > 0 || opt.Jitter > 0 || opt.Bandwidth > 0,
		rng:   rand.New(rand.NewPCG(uint64(opt.Seed), 0x666c65786c696e6b)),
		pipes: make([]*pipe, n*n),
		ends:  make([]*endpoint, n*n),
	}
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			nw.pipes[from*n+to] = &pipe{nw: nw, from: from, to: to, dead: make(chan struct{})}
		}
	}
	for from := range n {
		for to := range n {
			if from != to {
				nw.ends[from*n+to] = &endpoint{nw: nw, self: from, peer: to,
					out: nw.pipes[from*n+to], in: nw.pipes[to*n+from]}
			}
		}
	}
	return nw
}

// Size is the number of ranks.
func (nw *Network) Size() int { return nw.n }

// Link returns rank from's link to rank to (the same Link on every call).
// It panics when from == to or either is out of range.
func (nw *Network) Link(from, to int) fabric.Link {
	nw.check(from)
	nw.check(to)
	if from == to {
		panic(fmt.Sprintf("fake: no link from rank %d to itself", from))
	}
	return nw.ends[from*nw.n+to]
}

// Links returns all of rank's links indexed by peer, with links[rank] nil:
// the shape collectives.NewLinkPeers takes.
func (nw *Network) Links(rank int) []fabric.Link {
	nw.check(rank)
	links := make([]fabric.Link, nw.n)
	for p := range nw.n {
		if p != rank {
			links[p] = nw.ends[rank*nw.n+p]
		}
	}
	return links
}

// Kill makes rank disappear, as if its process died: on every link that
// touches it, the peers' pending and later requests fail with an error
// wrapping errs.ErrPeerLost that names the rank, and the dead rank's own
// requests fail with errs.ErrAborted. Killing twice is harmless.
func (nw *Network) Kill(rank int) {
	nw.check(rank)
	for p := range nw.n {
		if p == rank {
			continue
		}
		mine := fmt.Errorf("fake link %d->%d: this rank (%d) was killed: %w", rank, p, rank, errs.ErrAborted)
		theirs := fmt.Errorf("fake link %d->%d: rank %d was killed: %w", p, rank, rank, errs.ErrPeerLost)
		nw.failPair(rank, p, mine, theirs)
	}
}

// FailLink breaks the link between a and b in both directions: both sides'
// pending and later requests fail with an error wrapping errs.ErrPeerLost
// that names the other rank. Other links stay up.
func (nw *Network) FailLink(a, b int) {
	nw.check(a)
	nw.check(b)
	if a == b {
		panic(fmt.Sprintf("fake: FailLink(%d, %d): no link from a rank to itself", a, b))
	}
	ea := fmt.Errorf("fake link %d->%d: link failed, rank %d unreachable: %w", a, b, b, errs.ErrPeerLost)
	eb := fmt.Errorf("fake link %d->%d: link failed, rank %d unreachable: %w", b, a, a, errs.ErrPeerLost)
	nw.failPair(a, b, ea, eb)
}

// Abort fails every pending and later request on every link of every rank
// with err. It stands in for the job-wide abort that the bootstrap delivers
// to all ranks (bootstrap.Store.Abort), so tests can check what every rank
// reports after one rank gives up.
func (nw *Network) Abort(err error) {
	if err == nil {
		err = fmt.Errorf("fake network aborted: %w", errs.ErrAborted)
	}
	for a := range nw.n {
		for b := a + 1; b < nw.n; b++ {
			nw.failPair(a, b, err, err)
		}
	}
}

// failPair fails both directions between a and b: aErr for a's requests,
// bErr for b's. The first failure of a direction wins.
func (nw *Network) failPair(a, b int, aErr, bErr error) {
	nw.pipes[a*nw.n+b].fail(aErr, bErr) // a sends, b receives
	nw.pipes[b*nw.n+a].fail(bErr, aErr) // b sends, a receives
}

func (nw *Network) check(rank int) {
	if rank < 0 || rank >= nw.n {
		panic(fmt.Sprintf("fake: rank %d outside [0,%d)", rank, nw.n))
	}
}

// jitter draws one seeded delay in [0, Jitter).
func (nw *Network) jitter() time.Duration {
	if nw.opt.Jitter <= 0 {
		return 0
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return time.Duration(nw.rng.Int64N(int64(nw.opt.Jitter)))
}

// endpoint is one rank's side of the link to one peer.
type endpoint struct {
	nw         *Network
	self, peer int
	out, in    *pipe // self -> peer, peer -> self
}

func (e *endpoint) Peer() int { return e.peer }

func (e *endpoint) Props() fabric.Props {
	lat := e.nw.opt.Latency
	return fabric.Props{
		Kind:      fabric.KindFake,
		Bandwidth: e.nw.opt.Bandwidth,
		Latency:   lat,
		Desc:      fmt.Sprintf("fake %d->%d (latency %v, jitter %v, bandwidth %g B/s, segment %d)", e.self, e.peer, lat, e.nw.opt.Jitter, e.nw.opt.Bandwidth, e.nw.opt.MaxSegment),
	}
}

func (e *endpoint) Send(tag fabric.Tag, buf []byte) fabric.Request { return e.out.send(tag, buf) }
func (e *endpoint) Recv(tag fabric.Tag, buf []byte) fabric.Request { return e.in.recv(tag, buf) }

// Abort fails this side's pending and later requests with err; the peer
// sees the link go away (errs.ErrPeerLost naming this rank), as it would
// when a real transport drops its connection.
func (e *endpoint) Abort(err error) {
	if err == nil {
		err = fmt.Errorf("fake link %d->%d aborted: %w", e.self, e.peer, errs.ErrAborted)
	}
	theirs := fmt.Errorf("fake link %d->%d: rank %d aborted the link: %w", e.peer, e.self, e.self, errs.ErrPeerLost)
	e.nw.failPair(e.self, e.peer, err, theirs)
}

// Close fails this side's pending and later requests with errs.ErrClosed;
// the peer sees errs.ErrPeerLost. Closing twice is harmless.
func (e *endpoint) Close() error {
	mine := fmt.Errorf("fake link %d->%d: %w", e.self, e.peer, errs.ErrClosed)
	theirs := fmt.Errorf("fake link %d->%d: rank %d closed the link: %w", e.peer, e.self, e.self, errs.ErrPeerLost)
	e.nw.failPair(e.self, e.peer, mine, theirs)
	return nil
}
