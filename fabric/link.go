// Package fabric holds what connects ranks: the Link interface that every
// transport implements (one sub-package per link type: fake, shm, tcp, and
// later nvlink, pcie, net), topology, and the multi-link balancer.
//
// A Link joins this rank to one peer. It carries messages: a Tag (32 opaque
// bytes chosen by the caller, checked by the receiver) and a payload.
package fabric

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// Kind names a link type.
type Kind string

const (
	KindFake   Kind = "fake"
	KindShm    Kind = "shm"
	KindTCP    Kind = "tcp"
	KindNVLink Kind = "nvlink"
	KindPCIe   Kind = "pcie"
	KindNet    Kind = "net"
)

// Props describes a link for planners and for the link report.
type Props struct {
	Kind      Kind
	Bandwidth float64       // estimated bytes per second, one direction
	Latency   time.Duration // estimated one-way latency of a small message
	Desc      string        // human-readable endpoint description, e.g. "shm host1 /dev/shm ring 4 MiB" or "tcp 10.0.0.1:4000->10.0.0.2:4100 (eth0)"
}

// Tag is 32 opaque bytes that travel with every message. The receiver of a
// message compares the tag it posted with the tag that arrived; a difference
// fails the receive with a *TagMismatchError. The collectives layer encodes
// its header (communicator, sequence number, operation, dtype, count, root,
// step) in it, so a mismatch between ranks is caught on the first message.
type Tag [4]uint64

// Request is an asynchronous send or receive.
//
// Contract: Done is closed exactly once, when the operation has completed or
// failed; after that Err reports the outcome (nil on success) and never
// changes. Wait blocks until Done or until ctx ends; when ctx ends first it
// returns an error wrapping ctx.Err() (and errs.ErrTimeout for a deadline) but
// does NOT cancel the operation: the buffer stays owned by the link until
// Done, or until the link is Aborted or Closed (which completes every pending
// request with an error).
type Request interface {
	Done() <-chan struct{}
	Err() error
	Wait(ctx context.Context) error
}

// Link joins this rank to one peer.
//
// Ordering: messages in one direction are delivered in the order their Send
// calls were made, and are matched to Recv calls in the order those were
// made (FIFO; no matching by tag). Callers that issue Sends (or Recvs) from
// several goroutines must order them themselves.
//
// Ownership: the buffer passed to Send must not be modified, and the buffer
// passed to Recv must not be read or modified, until the request is Done.
//
// Sizes: a Recv must be posted with exactly the length of the matching
// message; a different length fails the receive with an error wrapping
// errs.ErrMismatch (the sender's request completes normally). Zero-length
// messages are allowed (they carry only the tag).
//
// Failure: when the peer dies, the connection breaks, or a deadline inside
// the transport expires, every pending and later request fails with an error
// wrapping errs.ErrPeerLost that names the peer rank, host and link. Abort
// fails every pending and later request with the given error. Close releases
// the link's resources; pending requests fail with errs.ErrClosed.
//
// Send, Recv, Abort, Close and Props are safe for concurrent use.
type Link interface {
	Peer() int
	Props() Props
	Send(tag Tag, buf []byte) Request
	Recv(tag Tag, buf []byte) Request
	Abort(err error)
	Close() error
}

// Endpoint is one rank's side of one transport for one communicator. It is
// created first, its Address is published through the bootstrap, and then
// Connect is called on both ranks of every pair that needs a link (each side
// calls Connect once with the other's address; the transport pairs them).
type Endpoint interface {
	Kind() Kind
	// Address returns opaque bytes that peers pass to Connect. Owned by the
	// caller once returned.
	Address() []byte
	// Connect establishes the link to peer. It blocks until the link is ready
	// on both sides or ctx ends. Both ranks must call it for the pair.
	Connect(ctx context.Context, peer int, peerAddress []byte) (Link, error)
	// Close releases listening sockets / segments. Links already made stay.
	Close() error
}

// TagMismatchError reports that a message arrived with another tag than the
// receive expected.
type TagMismatchError struct {
	Peer      int
	Want, Got Tag
}

func (e *TagMismatchError) Error() string {
	return fmt.Sprintf("message from rank %d has tag %x, expected %x", e.Peer, e.Got, e.Want)
}

func (e *TagMismatchError) Unwrap() error { return errs.ErrMismatch }

// AsTagMismatch extracts a *TagMismatchError from err.
func AsTagMismatch(err error) (*TagMismatchError, bool) {
	var t *TagMismatchError
	ok := errors.As(err, &t)
	return t, ok
}

// WaitAll waits for every request and returns the first error (in the order
// given) after all are Done, or ctx's error. It never returns while a request
// that did not fail is still pending unless ctx ended.
func WaitAll(ctx context.Context, reqs ...Request) error {
	var first error
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := r.Wait(ctx); err != nil && first == nil {
			first = err
			if ctx.Err() != nil {
				return first
			}
		}
	}
	return first
}
