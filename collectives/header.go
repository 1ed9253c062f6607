package collectives

import (
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// The safety header. Every message a collective sends carries, in its
// fabric.Tag, what the sending rank believes it is doing: communicator,
// call number, collective, algorithm, dtype, op, count, root and the
// message's step within the algorithm. The receiving link compares it with
// the tag of the receive it posted, so ranks that called different
// collectives, with different arguments, or that skipped a call, fail on
// the first message between them instead of exchanging garbage or hanging
// (NCCL's most common complaint). Because both tags come back in the
// *fabric.TagMismatchError, the error can say exactly what differs.
//
// Layout (4 × 64 bits):
//
//	w0: communicator id
//	w1: call number (40 bits) | kind (8) | dtype (8) | op (8)
//	w2: magic (8) | algorithm (8) | count (48)
//	w3: root+1 (24 bits, 0 = none) | step (40)
//
// For point-to-point messages the call number is the per-pair message
// number and the count is the length in bytes.

type kind uint8

const (
	kindAllReduce kind = iota + 1
	kindAllGather
	kindReduceScatter
	kindBroadcast
	kindReduce
	kindAllToAll
	kindBarrier
	kindP2P
)

var kindNames = [...]string{"?", "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "barrier", "send/recv"}

func (k kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

type algo uint8

const (
	algoNone     algo = iota // not chosen yet (argument errors)
	algoLocal                // one rank: no messages
	algoHeader               // count 0: one empty message around the ring
	algoRing                 // ring reduce-scatter / allgather / allreduce
	algoRD                   // recursive doubling
	algoChain                // pipelined chain (broadcast, reduce)
	algoTree                 // binomial tree (broadcast, reduce)
	algoPairwise             // pairwise exchange (all-to-all)
	algoDissem               // dissemination (barrier)
	algoDirect               // point-to-point
	algoHier                 // by host: allreduce (allReduceHier)
)

var algoNames = [...]string{"none", "local", "header", "ring", "rd", "chain", "tree", "pairwise", "dissemination", "direct", "hier"}

func (a algo) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("algo(%d)", uint8(a))
}

const (
	tagMagic = 0xf1
	noField  = 0xff // dtype or op of a collective that has none
	mask40   = 1<<40 - 1
	mask48   = 1<<48 - 1
	maxCount = mask48
	maxRoot  = 1<<24 - 2
	noRoot   = -1
)

// header is what one rank believes the current operation is.
type header struct {
	kind  kind
	algo  algo
	dt    dtype.DType // noField when the kind has none
	op    dtype.Op    // noField when the kind has none
	count int64       // elements (bytes for point-to-point)
	root  int         // noRoot when the kind has none
	seq   uint64      // call number (per-pair message number for point-to-point)
}

func (h header) tag(comm, step uint64) fabric.Tag {
	return fabric.Tag{
		comm,
		(h.seq&mask40)<<24 | uint64(h.kind)<<16 | uint64(h.dt)<<8 | uint64(h.op),
		tagMagic<<56 | uint64(h.algo)<<48 | uint64(h.count)&mask48,
		uint64(h.root+1)<<40 | step&mask40,
	}
}

// decodeTag inverts header.tag.
func decodeTag(t fabric.Tag) (comm uint64, h header, step uint64, ok bool) {
	h = header{
		seq:   t[1] >> 24,
		kind:  kind(t[1] >> 16),
		dt:    dtype.DType(t[1] >> 8),
		op:    dtype.Op(t[1]),
		algo:  algo(t[2] >> 48),
		count: int64(t[2] & mask48),
		root:  int(t[3]>>40) - 1,
	}
	return t[0], h, t[3] & mask40, t[2]>>56 == tagMagic
}

// String describes the operation the way a user wrote it, e.g.
// "allreduce count=1000 float sum (call #5, ring)".
func (h header) String() string {
	var b strings.Builder
	if h.kind == kindP2P {
		fmt.Fprintf(&b, "send/recv of %d bytes (message #%d of the pair)", h.count, h.seq)
		return b.String()
	}
	b.WriteString(h.kind.String())
	if h.kind != kindBarrier {
		fmt.Fprintf(&b, " count=%d", h.count)
	}
	if h.dt != noField {
		fmt.Fprintf(&b, " %s", h.dt)
	}
	if h.op != noField {
		fmt.Fprintf(&b, " %s", h.op)
	}
	if h.root != noRoot {
		fmt.Fprintf(&b, " root=%d", h.root)
	}
	if h.algo == algoNone {
		fmt.Fprintf(&b, " (call #%d)", h.seq)
	} else {
		fmt.Fprintf(&b, " (call #%d, %s)", h.seq, h.algo)
	}
	return b.String()
}

// mismatch turns a tag mismatch on a message from peer into an error that
// wraps errs.ErrMismatch and says, for both ranks, what they called and
// which fields differ.
func mismatch(self, peer int, tm *fabric.TagMismatchError) error {
	wc, wh, ws, wok := decodeTag(tm.Want)
	gc, gh, gs, gok := decodeTag(tm.Got)
	if !wok || !gok {
		return fmt.Errorf("rank %d: message from rank %d is not a flexlink collective message: %w", self, peer, tm)
	}
	var diffs []string
	add := func(differ bool, name string) {
		if differ {
			diffs = append(diffs, name)
		}
	}
	add(wc != gc, "communicator")
	add(wh.kind != gh.kind, "collective")
	add(wh.count != gh.count, "count")
	add(wh.dt != gh.dt, "dtype")
	add(wh.op != gh.op, "op")
	add(wh.root != gh.root, "root")
	add(wh.seq != gh.seq, "call number")
	add(wh.algo != gh.algo, "algorithm")
	type side struct {
		rank int
		h    header
		comm uint64
		step uint64
	}
	a, b := side{peer, gh, gc, gs}, side{self, wh, wc, ws}
	if a.rank > b.rank {
		a, b = b, a
	}
	switch {
	case len(diffs) == 1 && diffs[0] == "algorithm":
		diffs[0] = "algorithm (ranks must share FLEXLINK_ALGO, FLEXLINK_ALGO_THRESHOLD)"
	case len(diffs) == 0: // same call, different message: the algorithms diverged
		diffs = append(diffs, fmt.Sprintf("message step (%d vs %d; ranks must share FLEXLINK_CHUNK_BYTES)", a.step, b.step))
	}
	desc := func(s side) string {
		if wc != gc {
			return fmt.Sprintf("%s on communicator %#x", s.h, s.comm)
		}
		return s.h.String()
	}
	return fmt.Errorf("%w: rank %d called %s, rank %d called %s (differs: %s; seen by rank %d)",
		errs.ErrMismatch, a.rank, desc(a), b.rank, desc(b), strings.Join(diffs, ", "), self)
}
