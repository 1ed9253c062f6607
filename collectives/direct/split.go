package direct

import (
	"fmt"
	"math"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/pcie"
)

// One call's split: which bytes of each push go over NVLink and each
// staged share (fabric/linkshare; the PCIe share and the net share riding
// with it, as fabric/shares lists them). planCall is a pure function of the
// call's shape, the shares of each pair and the balancer's fractions; do()
// runs it once per call and every part reads the result: the push
// allreduce's geometry, the ready message, the shares' plans, and each
// push of the algorithms (pushSplitWith takes its ranges from it).
//
// A push of Len bytes toward a peer is cut head | ... | part 1 | part 0:
// the head goes over the copy lanes, share 0's part (the PCIe share's,
// staged D2H, read by the peer over PCIe) is the tail, each next share's
// (the net share's: staged D2H, sent over the NIC) the bytes just before
// the previous one's. Each part's size is the running total of the bytes
// pushed to the peer so far times its planned share, rounded up to a page,
// less what is staged already (pcie.Plan.Due), so the parts add up to the
// plan however the algorithm cuts its pushes.

// maxShares is the most staged shares a plane drives.
const maxShares = 4

// splitIn is what a call's split depends on.
type splitIn struct {
	Kind     plane.Kind
	Count    int // o.Count (elements)
	Size     int // bytes per element
	N, Me    int
	Pull     bool   // an allgather or alltoall this rank pulls (moveModes.pulls): nothing pushed
	ARMode   string // FLEXLINK_GPU_ALLREDUCE: auto, push or read
	ChunkMax int    // FLEXLINK_GPU_CHUNK_BYTES

	// Shares are the staged shares' specs, in the plane's order; Links[j]
	// is which of them this rank's pair toward rank j has (nil, or the
	// zero value: NVLink only).
	Shares []linkshare.Spec
	Links  []pairLinks
}

// pairLinks says which staged shares a pair has, by share.
type pairLinks [maxShares]bool

// sharesFunc is the balancer's fraction of a push of b bytes toward peer
// for share k (the pair's planner).
type sharesFunc func(k, peer, b int) float64

// callPlan is one call's split.
type callPlan struct {
	Push  pushGeom    // the push allreduce's geometry (Push.ok false: not this call)
	Bytes int         // B: bytes this rank pushes to each peer over the copy lanes (0: nothing to split)
	To    []peerSplit // by rank (empty for me)
}

// peerSplit is the split toward one peer.
type peerSplit struct {
	Parts  [maxShares]pcie.Plan // by share: its part's sizes (Bytes 0: none)
	Pushes []pushPart           // in the order the algorithm pushes them
	next   int                  // pushes taken so far (take)
	pushed int                  // their bytes
}

// pushPart is one push toward a peer: Len bytes for offset Off of the
// peer's recv buffer, of which the last Parts[0] go over share 0, the
// Parts[1] before them over share 1, and so on; the head over NVLink.
type pushPart struct {
	Off, Len int
	Parts    [maxShares]int
}

// Head is the NVLink part's length.
func (x pushPart) Head() int {
	h := x.Len
	for _, n := range x.Parts {
		h -= n
	}
	return h
}

// planCall splits the call in; fraction is asked only for the shares a
// pair has whose fraction is the balancer's.
func planCall(in splitIn, fraction sharesFunc) callPlan {
	cp := callPlan{To: make([]peerSplit, in.N)}
	if in.Kind == plane.AllReduce {
		cp.Push = pushGeomOf(in)
	}
	var pushes func(j int) []pushPart
	cp.Bytes, pushes = pushesOf(in, cp.Push.ok)
	if cp.Bytes == 0 {
		return cp
	}
	for j := range in.N {
		if j == in.Me {
			continue
		}
		ps := &cp.To[j]
		ps.Pushes = pushes(j)
		var l pairLinks
		if j < len(in.Links) {
			l = in.Links[j]
		}
		staged := false
		for k, sp := range in.Shares {
			if !l[k] || sp.Rides && !l[0] {
				continue // a riding share has parts only where the first share has a link
			}
			f := sp.Fixed
			if f < 0 {
				if f = fraction(k, j, cp.Bytes); f*float64(cp.Bytes) < float64(sp.MinPart) {
					f = 0 // too small to pay for its fixed cost (netshare.DefaultMinPart)
				}
			}
			ps.Parts[k] = pcie.Size(cp.Bytes, math.Min(f, sp.Max), sp.Staging, sp.MinSlot)
			staged = true
		}
		if staged {
			cutPushes(ps, cp.Bytes, len(in.Shares))
		}
	}
	return cp
}

// cutPushes gives each of ps's pushes its parts of the n shares: each
// part's running total to a page (pcie.Plan.Due), no part once its
// staging table is full (pcie.MaxSegs entries, pieces that continue the
// last one merged into it), each part at most what the parts after it
// leave of the push.
func cutPushes(ps *peerSplit, b, n int) {
	var pushed int
	var segs [maxShares]segCount
	for i := range ps.Pushes {
		x := &ps.Pushes[i]
		pushed += x.Len
		end := x.Off + x.Len // the part's end in the peer's recv
		for k := range n {
			if ps.Parts[k].Bytes > 0 && segs[k].n < pcie.MaxSegs {
				x.Parts[k] = min(end-x.Off, ps.Parts[k].Due(pushed, b, segs[k].staged, x.Len))
			}
			end -= x.Parts[k]
			segs[k].add(end, x.Parts[k])
		}
	}
}

// segCount follows a staging table's length as pieces are staged.
type segCount struct{ n, staged, end int }

func (c *segCount) add(off, n int) {
	if n == 0 {
		return
	}
	if c.n == 0 || c.end != off {
		c.n++
	}
	c.staged, c.end = c.staged+n, off+n
}

// pushesOf is B, the bytes this rank pushes to each peer over the copy
// lanes, and the pushes toward peer j in the algorithm's order. It mirrors
// the algorithms' choices (moves.go, ops.go): an allgather's or alltoall's
// block once the pushes together reach fanOutMin (one push per peer, into
// block Me of its recv); the read allreduce's own block when it is
// pipelined (one push per chunk). Pushes that stay on the caller's stream
// are small and never split; the push allreduce keeps NVLink only (its
// scratch pushes are ordered by per-chunk events that a staged part would
// need too), and so do pull allgathers and alltoalls, which push nothing.
func pushesOf(in splitIn, pushAllReduce bool) (int, func(j int) []pushPart) {
	sz := in.Size
	switch in.Kind {
	case plane.AllGather, plane.AllToAll:
		blk := in.Count * sz
		if in.Pull || (in.N-1)*blk < fanOutMin || blk == 0 {
			return 0, nil
		}
		return blk, func(int) []pushPart { return []pushPart{{Off: in.Me * blk, Len: blk}} }
	case plane.AllReduce:
		if pushAllReduce || in.N < 2 {
			return 0, nil
		}
		lo, hi := blockRange(in.Count, in.N, in.Me, sz)
		ce := chunkElems(in.ChunkMax, (hi-lo)*sz, sz)
		if hi-lo <= ce {
			return 0, nil
		}
		return (hi - lo) * sz, func(int) []pushPart {
			var out []pushPart
			for a := lo; a < hi; a += ce {
				out = append(out, pushPart{Off: a * sz, Len: (min(hi, a+ce) - a) * sz})
			}
			return out
		}
	}
	return 0, nil
}

// pushGeomOf decides, identically on every rank, whether an allreduce uses
// the push allreduce and with what geometry.
func pushGeomOf(in splitIn) pushGeom {
	if in.N < 2 || in.ARMode == "read" {
		return pushGeom{}
	}
	sz := in.Size
	lo, hi := blockRange(in.Count, in.N, 0, sz)
	per := hi - lo
	blockBytes := per * sz
	if blockBytes == 0 || (in.N-1)*blockBytes > scratchCap || in.ARMode == "auto" && blockBytes < pushMinBlock {
		return pushGeom{}
	}
	ce := chunkElems(in.ChunkMax, blockBytes, sz)
	if (per+ce-1)/ce > pushChunks {
		g := max(1, blockAlign/sz)
		ce = ((per+pushChunks-1)/pushChunks + g - 1) / g * g
	}
	return pushGeom{ok: true, per: per, ce: ce}
}

// take is the next planned push toward peer j, which must be Len n bytes
// at offset off of j's recv: an algorithm that pushes what the plan did
// not foresee is a bug, and fails the call rather than stage wrong bytes.
func (cp *callPlan) take(j, off, n int) (pushPart, error) {
	if j >= len(cp.To) {
		return pushPart{}, fmt.Errorf("push toward rank %d outside the call's plan (a bug)", j)
	}
	ps := &cp.To[j]
	if ps.next >= len(ps.Pushes) || ps.Pushes[ps.next].Off != off || ps.Pushes[ps.next].Len != n {
		return pushPart{}, fmt.Errorf("push %d toward rank %d (%d bytes at %d) is not the call's plan %v (a bug)", ps.next, j, n, off, ps.Pushes)
	}
	x := ps.Pushes[ps.next]
	ps.next++
	ps.pushed += n
	return x, nil
}
