package direct

import (
	"encoding/binary"
	"fmt"
	"math"

	"flexlink/collectives/plane"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// One call's PCIe share, in the order do() runs it (the protocol and why
// it is safe are in gpu_pcie.go):
//
//	pcieBegin      plan each peer's split (before the ready message)
//	pcieReadyWords announce it in the ready message
//	pcieReady      read the peers' announcements; start timings
//	pushSplit      during the work: head on the copy lanes, tail staged D2H
//	pcieFinish     after the work: record the last slot, join the D2H streams
//	doneMessage    the staging table for the receiver
//	pcieReceive    after the done handshake: H2D out of the peers' staging
//	               (gpu_pcie_recv.go)

// pcieSplitRec is one side's view of a pair's staging table in one call
// (tests compare the sender's and the receiver's).
type pcieSplitRec struct {
	from, to  int
	call      uint64 // the sender's call number
	receiver  bool   // recorded by the receiver
	slotBytes int
	segs      []pcieSeg
	bytes     int // sender: bytes planned for the pushes; receiver: 0
	pushed    int // sender: bytes the pushes carried
}

// pushBytes is how many bytes o pushes to each peer over the copy lanes,
// the B a split divides. It mirrors the choices of gpu_direct_ops.go:
// allgather and alltoall blocks once the pushes together reach fanOutMin,
// the read allreduce's own block when it is pipelined. Pushes that stay on
// the caller's stream are small and never split; the push allreduce keeps
// NVLink only (its scratch pushes are ordered by per-chunk events that a
// PCIe part would need too), and so do pull allgathers and alltoalls
// (gpu_direct_pull.go), which push nothing.
func (p *directPlane) pushBytes(o *plane.Op) int {
	sz := o.DT.Size()
	switch o.Kind {
	case plane.AllGather, plane.AllToAll:
		if p.pulls(o) {
			return 0 // kernels read the peers' blocks over NVLink: nothing to split
		}
		if blk := o.Count * sz; (p.n-1)*blk >= fanOutMin {
			return blk
		}
	case plane.AllReduce:
		if p.pushPlan(o).ok {
			return 0
		}
		lo, hi := blockRange(o.Count, p.n, p.me, sz)
		if hi-lo > p.chunkElems((hi-lo)*sz, sz) && p.n > 1 {
			return (hi - lo) * sz
		}
	}
	return 0
}

// pcieBegin plans this call's PCIe part toward every peer.
func (p *directPlane) pcieBegin(o *plane.Op, peers []int) error {
	x := &p.px
	x.cur = [2]int64{}
	if x.tx == nil {
		return nil
	}
	b := 0
	if o.Kind != plane.Group {
		b = p.pushBytes(o)
	}
	for _, j := range peers {
		t := x.tx[j]
		if t == nil {
			continue
		}
		t.bytes, t.plan, t.capBytes, t.slotBytes = b, 0, 0, 0
		t.pushed, t.staged, t.slot, t.used, t.sealed, t.segs = 0, 0, -1, false, false, t.segs[:0]
		p.probeSettle(t)
		if b == 0 {
			continue
		}
		f, by := x.fixed, "FLEXLINK_PCIE_SHARE"
		if f < 0 {
			f, by = 0, "balancer"
			for _, sh := range t.planner.Shares(b) {
				if sh.Link == linkPCIe {
					f = sh.Fraction
				}
			}
		}
		t.setPlan(b, math.Min(f, pcieMaxShare), x.staging, x.minSlot)
		p.probeArm(t)
		if t.plan > 0 || b >= t.planner.Threshold() {
			p.logShare(t, by)
		}
	}
	return nil
}

// setPlan sizes the PCIe part for b bytes and share f: whole pages, at most
// the staging buffer, in at most pcieSlots slots of at least minSlot
// (smaller copies waste PCIe bandwidth) unless the part is smaller still.
func (t *pcieTx) setPlan(b int, f float64, staging, minSlot int) {
	want := min(int(f*float64(b))/pcieAlign*pcieAlign, staging)
	if want <= 0 {
		return
	}
	sb := ((want+pcieSlots-1)/pcieSlots + pcieAlign - 1) / pcieAlign * pcieAlign
	sb = max(sb, min(minSlot, want)) // both whole pages
	t.slotBytes = sb
	t.capBytes = min(staging, pcieSlots*sb)
	t.plan = min(want, t.capBytes)
}

// pcieReadyWords writes the PCIe words of this rank's ready message to
// peer j (see gpu_direct_msg.go): announce, timed-push sequence number,
// and the report on j's last timed push to this rank.
func (p *directPlane) pcieReadyWords(j int, w []byte) {
	le := binary.LittleEndian
	if t := p.txTo(j); t != nil && t.plan > 0 {
		le.PutUint64(w[0:], 1)
		if t.probe.state == probeArmed && t.probe.report {
			le.PutUint64(w[8:], t.probe.seq)
		}
	}
	if r := p.rxFrom(j); r != nil {
		seq, ns := p.probeReport(r)
		le.PutUint64(w[16:], seq)
		le.PutUint64(w[24:], ns)
	}
}

func (p *directPlane) txTo(j int) *pcieTx {
	if p.px.tx == nil {
		return nil
	}
	return p.px.tx[j]
}

func (p *directPlane) rxFrom(j int) *pcieRx {
	if p.px.rx == nil {
		return nil
	}
	return p.px.rx[j]
}

// pcieReady reads the PCIe words of the peers' ready messages and, on s
// (which now waits on every peer's ready event), starts this call's
// timings.
func (p *directPlane) pcieReady(s *gpu.Stream, in [][]byte, peers []int) error {
	le := binary.LittleEndian
	for _, j := range peers {
		w := in[j][readyHeader-pcieWords : readyHeader]
		r := p.rxFrom(j)
		if r == nil {
			if le.Uint64(w) != 0 {
				return fmt.Errorf("rank %d on %s announces a pcie part, but this rank has no mapping of its staging buffer: %w",
					j, p.c.PeerHost(j), errs.ErrMismatch)
			}
		} else {
			r.expect = le.Uint64(w) == 1
			if seq := le.Uint64(w[8:]); seq != 0 && r.expect {
				r.probe.seq, r.probe.state = seq, probeArmed
			}
		}
		if t := p.txTo(j); t != nil {
			p.probeReported(t, le.Uint64(w[16:]), le.Uint64(w[24:]))
		}
	}
	return p.probeStart(s, peers)
}

// pushSplit enqueues dst = src toward peer j: the head on the copy lanes
// of group g (p.split), the tail, this push's PCIe part, staged D2H. off is
// dst's offset in the peer's recv buffer (the receiver's H2D target). Both
// parts wait for after.
func (p *directPlane) pushSplit(j, g, off int, dst, src *gpu.Buffer, after *gpu.Event) error {
	_, err := p.pushSplitWith(j, off, dst, src, after, func(d, s *gpu.Buffer) error { return p.split(j, g, d, s, after) })
	return err
}

// pushSplitWith is pushSplit with the NVLink head enqueued by nvlink; it
// returns the head's length.
func (p *directPlane) pushSplitWith(j, off int, dst, src *gpu.Buffer, after *gpu.Event, nvlink func(dst, src *gpu.Buffer) error) (int, error) {
	n := dst.Len()
	q := p.pcieTake(j, n)
	if n-q > 0 {
		if err := nvlink(dst.Sub(0, n-q), src.Sub(0, n-q)); err != nil {
			return 0, err
		}
	}
	if q == 0 {
		return n, nil
	}
	return n - q, p.stage(j, off+n-q, src.Sub(n-q, q), after)
}

// pcieTake returns the PCIe part of the next push of n bytes to peer j:
// the bytes pushed so far times the planned share, rounded up to a page,
// less what is staged already. Rounding the running total (not each part)
// makes the parts add up to the plan however the call cuts its pushes, and
// rounding it up keeps the last push's part within that push (it is at
// most its share of the push) as long as every earlier push is at least
// two pages, which the algorithms' chunks are.
func (p *directPlane) pcieTake(j, n int) int {
	t := p.txTo(j)
	if t == nil {
		return 0
	}
	t.pushed += n
	if t.plan == 0 || len(t.segs) == pcieMaxSegs {
		return 0
	}
	want := (int64(min(t.pushed, t.bytes))*int64(t.plan)/int64(t.bytes) + pcieAlign - 1) / pcieAlign * pcieAlign
	return max(0, min(int(min(want, int64(t.plan)))-t.staged, n, t.capBytes-t.staged))
}

// stage copies src D2H into the staging buffer toward j, slot by slot,
// recording a slot's event when the copies move past it, and notes where
// the bytes go (off in j's recv).
func (p *directPlane) stage(j, off int, src *gpu.Buffer, after *gpu.Event) error {
	t := p.px.tx[j]
	if t.sealed {
		return fmt.Errorf("rank %d: pcie part toward rank %d staged after the call's copies were joined (a bug)", p.me, j)
	}
	if f := p.px.fault; f != nil {
		if err := f("d2h", j); err != nil {
			return fmt.Errorf("pcie part toward rank %d: %w", j, err)
		}
	}
	if after != nil {
		if err := t.stream.Wait(after); err != nil {
			return err
		}
	}
	mem := t.mem.Bytes()
	for pos := 0; pos < src.Len(); {
		k := t.staged / t.slotBytes
		if k != t.slot {
			if err := p.recordSlot(t); err != nil {
				return err
			}
			t.slot = k
		}
		m := min(src.Len()-pos, (k+1)*t.slotBytes-t.staged)
		if err := t.stream.CopyDtoH(mem[t.staged:t.staged+m], src.Sub(pos, m)); err != nil {
			return fmt.Errorf("pcie part toward rank %d: %w", j, err)
		}
		pos += m
		t.staged += m
	}
	if k := len(t.segs) - 1; k >= 0 && t.segs[k].off+t.segs[k].n == off {
		t.segs[k].n += src.Len()
	} else {
		t.segs = append(t.segs, pcieSeg{off: off, n: src.Len()})
	}
	t.used = true
	p.px.cur[linkPCIe] += int64(src.Len())
	return nil
}

// recordSlot records the event of the slot t is filling, if any.
func (p *directPlane) recordSlot(t *pcieTx) error {
	if t.slot < 0 {
		return nil
	}
	p.note(traceRec{actor: p.me, owner: p.me, to: t.peer, chunk: -2 - t.slot, call: p.calls})
	return t.stream.Record(t.slots[t.slot])
}

// pcieFinish, after the work, records the last slot of every peer's PCIe
// part and makes s wait for the D2H copies (they read this rank's send
// buffer, which the caller may reuse once s passes the call).
func (p *directPlane) pcieFinish(s *gpu.Stream) error {
	for _, t := range p.px.tx {
		if t == nil || t.sealed {
			continue
		}
		t.sealed = true
		if !t.used {
			continue
		}
		if err := p.recordSlot(t); err != nil {
			return err
		}
		t.slot, t.used = -1, false
		if err := t.stream.Record(t.end); err != nil {
			return err
		}
		if err := s.Wait(t.end); err != nil {
			return err
		}
		if f := p.px.onSplit; f != nil {
			f(pcieSplitRec{from: p.me, to: t.peer, call: p.calls, slotBytes: t.slotBytes,
				segs: append([]pcieSeg(nil), t.segs...), bytes: t.bytes, pushed: t.pushed})
		}
	}
	p.probeDone()
	return nil
}

const pcieTableHeader = 3 * 8 // call, slot bytes, entries

// doneMessage appends this rank's done message to peer j to b: the call
// number and, when this rank announced a PCIe part to j, the staging
// table: slot size, entries, then (offset in j's recv, length) per entry,
// padded to pcieMaxSegs entries so that j, which knows only that a table
// comes, can post its receive with the exact length.
func (p *directPlane) doneMessage(j int, call uint64, b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, call)
	t := p.txTo(j)
	if t == nil || t.plan == 0 {
		return b
	}
	b = le.AppendUint64(b, uint64(t.slotBytes))
	b = le.AppendUint64(b, uint64(len(t.segs)))
	for _, sg := range t.segs {
		b = le.AppendUint64(b, uint64(sg.off))
		b = le.AppendUint64(b, uint64(sg.n))
	}
	return append(b, make([]byte, pcieTableHeader+pcieMaxSegs*16-len(b))...)
}
