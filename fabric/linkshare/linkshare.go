// Package linkshare is the contract between the direct GPU plane
// (collectives/direct) and its staged link shares: the links beside NVLink
// that carry part of each large push between two GPUs of one host
// (fabric/pcieshare through pinned host memory, fabric/netshare through the
// NIC). The plane knows no share by name: fabric/shares builds the list
// from the settings, and the plane drives every share of the list through
// Share, in the list's order, at fixed points of its protocol:
//
//	setup       Kind                    its link's name (LinkShares)
//	            BlobBytes, Offer        this rank's part of the setup exchange
//	            Open                    every rank's parts (list order: a
//	                                    share may use an earlier one's pairs)
//	the split   Has, Spec, Settle,      which bytes of each push the share
//	            Fraction                carries: one pure function per call
//	                                    (collectives/direct/split.go) reads them
//	one call    Begin                   the call's split (Plan), before the ready message
//	            Words, ReadyWords       its words in this rank's ready message to a peer
//	            Ready                   its words in a peer's ready message
//	            Start                   s now waits on every peer's ready event
//	            Stage                   during the work: a push's part, D2H
//	            Probe                   as the work joins the copy lanes
//	            Complete                after the work: seal the parts, s waits for the D2H
//	            Send                    then, before the done handshake: the wire
//	            DoneLen, DoneMessage    its bytes in the done messages (after the call number)
//	            Receive                 after the done handshake: the peers' parts H2D
//	            Close
//
// A push of Len bytes toward a peer is cut head | ... | part 1 | part 0:
// the first share of the list takes the tail, each next one the bytes just
// before the previous one's, the head goes over NVLink. A share whose Spec
// says Rides has parts only on pairs where the first share has a link (it
// uses that share's planners and probes, as the net share uses the PCIe
// pairs'). docs/ARCHITECTURE.md, "How to add a link share", says how to
// write one.
package linkshare

import (
	"context"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
)

// Share is one staged link share of the direct plane's large pushes.
type Share interface {
	Setup
	Splitter
	Messages
	Call
}

// Setup is a share's part of the plane's setup exchange (one all-gather),
// and its name.
type Setup interface {
	Kind() fabric.Kind                                      // its link's kind: its key in LinkShares
	BlobBytes() int                                         // this rank's part's length, alike on every rank
	Offer(ctx context.Context, b []byte) error              // write it (listen, allocate, export)
	Open(ctx context.Context, blobs [][]byte, o Open) error // read every rank's (blobs[r]); collective
	Close() error                                           // release everything (no call runs)
}

// Open is what Open may use beside the blobs.
type Open struct {
	Bus   []string // Bus[r]: rank r's GPU's PCI bus id (profile keys)
	Agree Agree    // an all-gather over the host links
}

// Agree all-gathers every rank's mine into all (rank r's at r*len(mine)).
type Agree func(ctx context.Context, mine, all []byte) error

// Splitter is what the call's split asks of a share.
type Splitter interface {
	Has(peer int) bool                // this rank's pair toward peer has the link
	Spec() Spec                       // how its parts are sized (read every call: tests change it)
	Settle(peers []int)               // before the split: feed back finished timings
	Fraction(peer, bytes int) float64 // the planner's share of a push of bytes toward peer
}

// Spec says how the split sizes a share's parts: the fraction (Fixed, or
// the planner's Fraction when Fixed < 0; a planner's part under MinPart
// bytes is none) capped at Max, sized by pcie.Size over the share's
// staging (whole pages, at least MinSlot per slot).
type Spec struct {
	Fixed   float64 // a fixed fraction; < 0: the planner's
	MinPart int     // the smallest part a planner's fraction may give
	Max     float64 // the largest fraction of a push
	Staging int     // bytes of the staging buffer toward a peer
	MinSlot int     // the smallest slot
	Rides   bool    // parts only on pairs where the first share of the list has a link
}

// Messages are a share's words in the plane's per-call messages.
type Messages interface {
	Begin(peers []int, call uint64, p Plan)             // take the call's split, before the ready message
	Words() int                                         // bytes of its words in every ready message
	ReadyWords(peer int, w []byte)                      // write them, to peer (list order)
	Ready(peer int, w []byte) error                     // read peer's (every share of every peer, before Start)
	Start(s *gpu.Stream, peers []int) error             // s now waits on every peer's ready event
	DoneLen(peer int) int                               // bytes of peer's done message for this share
	DoneMessage(peer int, call uint64, b []byte) []byte // append this rank's to b
}

// Call is a share's work in one call, in this order.
type Call interface {
	// Stage gives the share a push's part toward peer: src's bytes, for
	// offset off of the peer's recv, staged after the event after (nil:
	// none).
	Stage(peer, off int, src *gpu.Buffer, after *gpu.Event) error
	Probe() error                 // as the work joins the copy lanes: time them
	Complete(s *gpu.Stream) error // after the work: seal, s waits for the D2H copies
	// Send moves what the share's wire carries, before the done handshake.
	Send(ctx context.Context, s *gpu.Stream, recv *gpu.Buffer, peers []int) error
	// Receive, after the done handshake (done[j]: this share's bytes of
	// peer j's done message), copies the peers' parts into recv; s waits.
	Receive(s *gpu.Stream, recv *gpu.Buffer, done [][]byte, peers []int) error
}

// Plan is one call's split as a share reads it.
type Plan interface {
	Bytes() int              // B: bytes pushed to each peer over the copy lanes (0: none)
	Part(peer int) pcie.Plan // this share's part toward peer
	Split(peer int) bool     // some share has a part toward peer
	Pushed(peer int) int     // bytes the call's pushes have carried toward peer so far
}

// Lanes is the copy lanes toward one peer as a share's probe times them
// (fabric/nvlink.Lanes).
type Lanes interface {
	Len() int
	Used(k int) bool
	Stream(k int) *gpu.Stream
}

// Trace is one record (Wait false) or wait of a share's slot event:
// Owner's event toward To, in the sender's call Call (the plane's event
// order test reads them).
type Trace struct {
	Owner, To, Slot int
	Call            uint64
	Wait            bool
}
