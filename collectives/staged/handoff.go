package staged

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
)

// PXNHandoff is what the staged plane needs from its communicator for the
// GPU hand-off of PXN all-to-alls (FLEXLINK_PXN_GPU_HANDOFF, docs/PXN.md):
// the routes (via(s, d): the rank of s's host that sends s's message for
// d; ok false when the hand-off does not apply) and the proxy's
// all-to-all whose relays' messages are already on them
// (comm.Comm.PXNAllToAllvGathered).
type PXNHandoff interface {
	PXNHandoff(ctx context.Context) (via func(s, d int) int, ok bool, err error)
	PXNAllToAllvGathered(ctx context.Context, send, recv [][]byte, gathered map[[2]int][]byte) (ok bool, err error)
}

// handoffState is a rank's GPU hand-off memory, kept across calls: its
// staging, which its local senders copy their blocks into (grown on
// demand; a grown-out buffer stays allocated until Close, since siblings
// may still have it mapped), and its mappings of its siblings' staging.
type handoffState struct {
	p       *stagedPlane
	stage   *gpu.Buffer
	handle  []byte
	retired []*gpu.Buffer
	views   map[int]handoffView
	off     bool // a sibling's staging could not be opened: shm hand-off from now on
}

type handoffView struct {
	handle []byte
	buf    *gpu.Buffer
}

// offer is what a sibling relay told this rank: its staging's handle and
// where this rank's blocks go in it.
type offer struct {
	handle []byte
	base   int // where this rank's blocks start
	size   int // the staging's length
}

// handoffLayout is one call's plan on this rank.
type handoffLayout struct {
	me       int
	siblings []int // the other ranks of this host, ascending
	remote   []bool
	sendOff  []int         // offset of block d in the send buffer
	out      map[int][]int // sibling v -> length of my block for d that v relays (0: none)
	in       map[int][]int // sibling s -> length of s's block for d that I relay
	total    int           // bytes I relay
}

func (ho *handoffState) layout(via func(s, d int) int, sl []int) *handoffLayout {
	c := ho.p.c
	n, me := c.Size(), c.Rank()
	l := &handoffLayout{me: me, remote: make([]bool, n), sendOff: make([]int, n), out: map[int][]int{}, in: map[int][]int{}}
	off := 0
	for d := range n {
		l.sendOff[d] = off
		off += sl[d]
		l.remote[d] = c.PeerHost(d) != c.Host()
		if d != me && !l.remote[d] {
			l.siblings = append(l.siblings, d)
		}
	}
	for _, v := range l.siblings {
		l.out[v] = make([]int, n)
		for d := range n {
			if l.remote[d] && via(me, d) == v {
				l.out[v][d] = sl[d]
			}
		}
	}
	return l
}

// run runs an all-to-all whose blocks for other hosts' ranks
// go to their relays over CUDA IPC:
//  1. the ranks of a host tell each other the lengths of the blocks each
//     relays for the other;
//  2. each relay sizes its GPU staging and sends every sibling its IPC
//     handle and where that sibling's blocks go;
//  3. each rank copies its blocks into its relays' staging (device to
//     device: NVLink, or one GPU's copy engine when ranks share it), waits
//     for the copies, and tells every sibling whether it could;
//  4. each relay copies its staging to pinned host memory once and the
//     proxy sends from there (proxy.AllToAllvGathered); blocks for this
//     host's ranks and the rank's own-rail blocks are staged as before.
//
// When any rank of the host could not open a sibling's staging, the whole
// host takes the shm hand-off (exchange) for this and every later call.
func (ho *handoffState) run(ctx context.Context, o *plane.Op, s *gpu.Stream, x PXNHandoff, via func(s, d int) int) error {
	p := ho.p
	sl, rl := o.SendBytes, o.RecvBytes
	if o.Kind == plane.AllToAll {
		sl = make([]int, p.c.Size())
		for d := range sl {
			sl[d] = o.Count * o.DT.Size()
		}
		rl = sl
	}
	l := ho.layout(via, sl)
	if err := ho.lengths(ctx, l); err != nil {
		return p.fail(o, "gpu hand-off: lengths", err)
	}
	offers, err := ho.offer(ctx, l)
	if err != nil {
		return p.fail(o, "gpu hand-off: staging", err)
	}
	ok, err := ho.copyIn(ctx, o, s, l, offers)
	if err != nil {
		return p.fail(o, "gpu hand-off: copy into the relays", err)
	}
	ns, nr := total(sl), total(rl)
	mem, err := p.staging(ns + nr + l.total)
	if err != nil {
		return p.fail(o, "pinned staging", err)
	}
	hs, hr, hrel := mem[:ns:ns], mem[ns:ns+nr:ns+nr], mem[ns+nr:]
	for d := range sl {
		// Without the hand-off every block is staged; with it, not those
		// a sibling relays (they are in its staging already).
		if sl[d] > 0 && (!ok || !l.remote[d] || via(l.me, d) == l.me) {
			if err := s.CopyDtoH(hs[l.sendOff[d]:l.sendOff[d]+sl[d]], o.Send.Sub(l.sendOff[d], sl[d])); err != nil {
				return p.fail(o, "copy send to host", err)
			}
		}
	}
	if ok && l.total > 0 {
		if err := s.CopyDtoH(hrel, ho.stage.Sub(0, l.total)); err != nil {
			return p.fail(o, "copy relayed blocks to host", err)
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return p.fail(o, "copy send to host", err)
	}
	if ok {
		used, err := x.PXNAllToAllvGathered(ctx, split(hs, sl), split(hr, rl), ho.gathered(l, via, hrel))
		if err != nil {
			return err
		}
		if !used {
			return p.fail(o, "gpu hand-off", errors.New("PXN no longer applies"))
		}
	} else if err := p.exchange(ctx, o, hs, hr, sl, rl); err != nil {
		return err
	}
	return p.unstage(ctx, o, s, hr)
}

// siblingGroup exchanges one message of size bytes with every sibling:
// out(q) is what goes to q, the result maps q to what came from it.
func (ho *handoffState) siblingGroup(ctx context.Context, l *handoffLayout, size int, out func(q int) []byte) (map[int][]byte, error) {
	in := map[int][]byte{}
	var ops []collectives.P2P
	for _, q := range l.siblings {
		in[q] = make([]byte, size)
		ops = append(ops, collectives.P2P{Send: true, Peer: q, Buf: collectives.HostBuffer(out(q))},
			collectives.P2P{Peer: q, Buf: collectives.HostBuffer(in[q])})
	}
	if len(ops) == 0 {
		return in, nil
	}
	return in, ho.p.c.Engine().Group(ctx, ops)
}

// lengths is step 1: l.in and l.total from the siblings.
func (ho *handoffState) lengths(ctx context.Context, l *handoffLayout) error {
	n := ho.p.c.Size()
	in, err := ho.siblingGroup(ctx, l, 8*n, func(q int) []byte {
		b := make([]byte, 0, 8*n)
		for _, x := range l.out[q] {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
		return b
	})
	if err != nil {
		return err
	}
	for _, q := range l.siblings {
		v := make([]int, n)
		for d := range v {
			v[d] = int(binary.LittleEndian.Uint64(in[q][8*d:]))
		}
		l.in[q] = v
		l.total += total(v)
	}
	return nil
}

// offer is step 2: it makes sure this rank's staging holds
// l.total bytes, tells every sibling the staging's handle and where its
// blocks go, and returns, per sibling relay, its handle and this rank's
// base offset there.
func (ho *handoffState) offer(ctx context.Context, l *handoffLayout) (map[int]offer, error) {
	if l.total > 0 && (ho.stage == nil || ho.stage.Len() < l.total) {
		size := max(l.total, 1<<20)
		if ho.stage != nil { // grow geometrically: every grown-out buffer stays until Close
			size = max(size, 2*ho.stage.Len())
		}
		b, err := ho.p.dev.Alloc(size)
		if err != nil {
			return nil, err
		}
		h, err := b.IPCHandle()
		if err != nil {
			return nil, errors.Join(err, b.Free())
		}
		if ho.stage != nil {
			ho.retired = append(ho.retired, ho.stage)
		}
		ho.stage, ho.handle = b, h
	}
	base := map[int]int{}
	off := 0
	for _, q := range l.siblings {
		base[q] = off
		off += total(l.in[q])
	}
	const size = gpu.IPCHandleSize + 16
	stageLen := 0
	if ho.stage != nil {
		stageLen = ho.stage.Len()
	}
	in, err := ho.siblingGroup(ctx, l, size, func(q int) []byte {
		b := make([]byte, gpu.IPCHandleSize, size)
		copy(b, ho.handle) // zeros when this rank relays nothing yet
		b = binary.LittleEndian.AppendUint64(b, uint64(base[q]))
		return binary.LittleEndian.AppendUint64(b, uint64(stageLen))
	})
	if err != nil {
		return nil, err
	}
	out := map[int]offer{}
	for q, b := range in {
		out[q] = offer{handle: b[:gpu.IPCHandleSize], base: int(binary.LittleEndian.Uint64(b[gpu.IPCHandleSize:])),
			size: int(binary.LittleEndian.Uint64(b[gpu.IPCHandleSize+8:]))}
	}
	return out, nil
}

// copyIn is step 3: this rank copies its blocks into its sibling relays'
// staging, waits for the copies, and learns from every sibling whether it
// could; false (no error) when some rank of the host could not open a
// staging, and the host then takes the shm hand-off.
func (ho *handoffState) copyIn(ctx context.Context, o *plane.Op, s *gpu.Stream, l *handoffLayout, offers map[int]offer) (bool, error) {
	ok := !ho.off
	for _, v := range l.siblings {
		if !ok || total(l.out[v]) == 0 {
			continue
		}
		view, err := ho.view(v, offers[v])
		if err != nil {
			ho.p.c.Log().Info("gpu hand-off to the PXN relays not used: a relay's staging cannot be mapped; blocks go through pinned memory and shm",
				"relay", v, "err", err)
			ok = false
			break
		}
		off := offers[v].base
		for d, n := range l.out[v] {
			if n == 0 {
				continue
			}
			if off+n > view.Len() {
				return false, fmt.Errorf("relay rank %d's staging has %d bytes, block for rank %d ends at %d", v, view.Len(), d, off+n)
			}
			if err := s.CopyDtoD(view.Sub(off, n), o.Send.Sub(l.sendOff[d], n)); err != nil {
				return false, fmt.Errorf("into relay rank %d's staging: %w", v, err)
			}
			off += n
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return false, err
	}
	word := uint64(0)
	if ok {
		word = 1
	}
	in, err := ho.siblingGroup(ctx, l, 8, func(int) []byte { return binary.LittleEndian.AppendUint64(nil, word) })
	if err != nil {
		return false, err
	}
	for _, b := range in {
		ok = ok && binary.LittleEndian.Uint64(b) == 1
	}
	ho.off = !ok
	return ok, nil
}

// view maps sibling v's staging, reusing the mapping while v offers the
// same one.
func (ho *handoffState) view(v int, o offer) (*gpu.Buffer, error) {
	if w, ok := ho.views[v]; ok {
		if bytes.Equal(w.handle, o.handle) && w.buf.Len() == o.size {
			return w.buf, nil
		}
		delete(ho.views, v)
		if err := w.buf.Free(); err != nil {
			return nil, err
		}
	}
	b, err := ho.p.dev.OpenIPCBuffer(o.handle, o.size)
	if err != nil {
		return nil, err
	}
	ho.views[v] = handoffView{handle: bytes.Clone(o.handle), buf: b}
	return b, nil
}

// gathered is, on this rank as a relay, every sibling's message that it
// carries, in the staging's layout (step 2), now in host memory (hrel).
func (ho *handoffState) gathered(l *handoffLayout, via func(s, d int) int, hrel []byte) map[[2]int][]byte {
	g := map[[2]int][]byte{}
	off := 0
	for _, q := range l.siblings {
		for d, n := range l.in[q] {
			if l.remote[d] && via(q, d) == l.me {
				g[[2]int{q, d}] = hrel[off : off+n : off+n]
				off += n
			}
		}
	}
	return g
}

// close releases the staging and the mappings. Without clean (the ranks
// did not pass the closing barrier) the staging, which siblings may still
// copy into, is left to the process's end.
func (ho *handoffState) close(clean bool) error {
	var errs []error
	for v, w := range ho.views {
		errs = append(errs, w.buf.Free())
		delete(ho.views, v)
	}
	if clean {
		for _, b := range append(ho.retired, ho.stage) {
			if b != nil {
				errs = append(errs, b.Free())
			}
		}
	}
	ho.stage, ho.retired = nil, nil
	return errors.Join(errs...)
}
