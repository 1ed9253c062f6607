package pcieshare

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// One call's PCIe share, in the order the plane runs it (share.go says
// why it is safe):
//
//	Settle         feed back finished probes (before the split is planned)
//	Fraction       the pair planners' shares, for the plane's split
//	Begin          take each peer's part of the split (before the ready message)
//	ReadyWords     announce it in the ready message
//	Ready, Start   read the peers' announcements; start timings
//	Stage          during the work: a push's tail staged D2H
//	Probe          as the work joins the lanes: time the timed pushes' lanes
//	Complete       after the work: record the last slot, join the D2H streams
//	DoneMessage    the staging table for the receiver
//	DoneLen,       after the done handshake: H2D out of the peers' staging
//	Receive        (the receiving side, below)

// Words is the length of the share's words in a ready message:
// whether this rank's done message to the peer carries a staging table,
// the sequence number of this call's timed push to the peer (0: not
// timed), and this rank's report on the peer's last timed push to it
// (sequence number, nanoseconds).
const Words = 4 * 8

// Settle, before a call's split is planned, feeds back every finished
// probe toward the call's peers, so the shares the split asks for see it.
func (x *Share) Settle(peers []int) {
	for _, j := range peers {
		if t := x.Tx(j); t != nil {
			x.probeSettle(t)
		}
	}
}

// Fraction is the pair planner's PCIe fraction of a push of b bytes
// toward peer j.
func (x *Share) Fraction(j, b int) float64 {
	pc, _ := x.Shares(j, b)
	return pc
}

// Shares is the pair planner's PCIe and rider fractions of a push of b
// bytes toward peer j (0 for a link it gives nothing).
func (x *Share) Shares(j, b int) (pc, rider float64) {
	for _, sh := range x.tx[j].Planner.Shares(b) {
		switch sh.Link {
		case LinkPCIe:
			pc = sh.Fraction
		case LinkRider:
			rider = sh.Fraction
		}
	}
	return pc, rider
}

// Begin takes call's split toward every peer: the sizes of the PCIe
// parts, the probes armed and the shares logged.
func (x *Share) Begin(peers []int, call uint64, p linkshare.Plan) {
	x.call, x.plan = call, p
	if x.tx == nil {
		return
	}
	b := p.Bytes()
	for _, j := range peers {
		t := x.tx[j]
		if t == nil {
			continue
		}
		pl, split := p.Part(j), p.Split(j)
		if b == 0 {
			pl = pcie.Plan{}
		}
		t.part.Reset(b, pl)
		if b == 0 {
			continue
		}
		x.probeArm(t, split)
		if pl.Bytes > 0 || b >= t.Planner.Threshold() {
			by := "FLEXLINK_PCIE_SHARE"
			if x.Fixed < 0 {
				by = "balancer"
			}
			x.logShare(t, by)
		}
	}
}

// Words is the length of the share's words in a ready message.
func (x *Share) Words() int { return Words }

// ReadyWords writes the share's words (Words) of this rank's ready message
// to peer j: announce, timed-push sequence number, and the report on j's
// last timed push to this rank. The report's rider part (ns) is kept for
// the rider's words (RiderReport).
func (x *Share) ReadyWords(j int, w []byte) {
	le := binary.LittleEndian
	t := x.Tx(j)
	if t != nil && t.part.Plan.Bytes > 0 {
		le.PutUint64(w[0:], 1)
	}
	if t != nil && t.probe.s.Armed() && t.probe.s.Remote() {
		le.PutUint64(w[8:], t.probe.s.Seq())
	}
	if r := x.Rx(j); r != nil {
		seq, ns, rns := x.probeReport(r)
		le.PutUint64(w[16:], seq)
		le.PutUint64(w[24:], ns)
		r.riderNs = rns
	}
}

// RiderReport is this rank's report on peer j's last timed rider part
// (ns), which the rider's words of the ready message to j carry: set by
// ReadyWords, which runs first.
func (x *Share) RiderReport(j int) uint64 {
	if r := x.Rx(j); r != nil {
		return r.riderNs
	}
	return 0
}

// Ready keeps the share's words of peer j's ready message for Start,
// which reads them once the rider has read its own.
func (x *Share) Ready(j int, w []byte) error {
	x.words[j] = w
	return nil
}

// Start reads the share's words of the peers' ready messages (Ready) and,
// on s (which now waits on every peer's ready event), starts this call's
// timings.
func (x *Share) Start(s *gpu.Stream, peers []int) error {
	le := binary.LittleEndian
	for _, j := range peers {
		w := x.words[j]
		r := x.Rx(j)
		if r == nil {
			if le.Uint64(w) != 0 {
				return fmt.Errorf("rank %d on %s announces a pcie part, but this rank has no mapping of its staging buffer: %w",
					j, x.Host.PeerHost(j), errs.ErrMismatch)
			}
		} else {
			r.expect = le.Uint64(w) == 1
			if seq := le.Uint64(w[8:]); seq != 0 && (r.expect || r.Rider != nil && r.Rider.Expects()) {
				r.probe.seq, r.probe.state = seq, probeArmed
			}
		}
		if t := x.Tx(j); t != nil {
			var rns uint64
			if t.Rider != nil {
				rns = t.Rider.Report()
			}
			x.probeReported(t, le.Uint64(w[16:]), le.Uint64(w[24:]), rns)
		}
	}
	return x.probeStart(s, peers)
}

// Stage copies src D2H into the staging buffer toward j, slot by slot,
// recording a slot's event when the copies move past it, and notes where
// the bytes go (off in j's recv). after (nil: none) is the event the
// copies wait for.
func (x *Share) Stage(j, off int, src *gpu.Buffer, after *gpu.Event) error {
	t := x.tx[j]
	if err := t.part.CanStage(x.Me, j, "pcie", x.Fault); err != nil {
		return err
	}
	if err := t.part.Fill(t.Tx, off, src, after, func() error { return x.recordSlot(t) }); err != nil {
		return fmt.Errorf("pcie part toward rank %d: %w", j, err)
	}
	if x.Count != nil {
		x.Count(src.Len())
	}
	return nil
}

// Fill enqueues src's D2H into tx's staging on its stream, after the event
// after (nil: none), slot by slot: before the copies move into a new slot
// it calls record, which records the event of the slot being filled (if
// any, p.Slot ≥ 0). The piece goes to offset off of the peer's recv.
func (p *Part) Fill(tx *pcie.Tx, off int, src *gpu.Buffer, after *gpu.Event, record func() error) error {
	if after != nil {
		if err := tx.Stream.Wait(after); err != nil {
			return err
		}
	}
	mem := tx.Mem.Bytes()
	sb := p.Plan.SlotBytes
	for pos := 0; pos < src.Len(); {
		k := p.Staged / sb
		if k != p.Slot {
			if err := record(); err != nil {
				return err
			}
			p.Slot = k
		}
		m := min(src.Len()-pos, (k+1)*sb-p.Staged)
		if err := tx.Stream.CopyDtoH(mem[p.Staged:p.Staged+m], src.Sub(pos, m)); err != nil {
			return err
		}
		pos += m
		p.Staged += m
	}
	p.Segs = AppendSeg(p.Segs, off, src.Len())
	p.Used = true
	return nil
}

// recordSlot records the event of the slot t is filling, if any.
func (x *Share) recordSlot(t *Tx) error {
	if t.part.Slot < 0 {
		return nil
	}
	x.note(Trace{Owner: x.Me, To: t.Peer, Slot: t.part.Slot, Call: x.call})
	return t.Stream.Record(t.Slots[t.part.Slot])
}

// Complete, after the work, records the last slot of every peer's PCIe
// part and makes s wait for the D2H copies (they read this rank's send
// buffer, which the caller may reuse once s passes the call).
func (x *Share) Complete(s *gpu.Stream) error {
	for _, t := range x.tx {
		if t == nil || t.part.Sealed {
			continue
		}
		t.part.Sealed = true
		if !t.part.Used {
			continue
		}
		if err := x.recordSlot(t); err != nil {
			return err
		}
		t.part.Slot, t.part.Used = -1, false
		if err := t.Stream.Record(t.End); err != nil {
			return err
		}
		if err := s.Wait(t.End); err != nil {
			return err
		}
		if f := x.OnSplit; f != nil {
			f(SplitRec{From: x.Me, To: t.Peer, Call: x.call, SlotBytes: t.part.Plan.SlotBytes,
				Segs: append([]pcie.Seg(nil), t.part.Segs...), Bytes: t.part.Bytes, Pushed: x.plan.Pushed(t.Peer)})
		}
	}
	x.probeDone()
	return nil
}

// Send has nothing to send: the staging tables ride in the plane's done
// messages (DoneMessage), after which the receivers read the staging.
func (x *Share) Send(context.Context, *gpu.Stream, *gpu.Buffer, []int) error { return nil }

// DoneMessage appends the share's part of this rank's done message to
// peer j to b: when this rank announced a PCIe part to j, the staging
// table: call number, slot size, entries, then (offset in j's recv,
// length) per entry, padded to pcie.MaxSegs entries so that j, which knows
// only that a table comes, can post its receive with the exact length;
// nothing otherwise.
func (x *Share) DoneMessage(j int, call uint64, b []byte) []byte {
	t := x.Tx(j)
	if t == nil || t.part.Plan.Bytes == 0 {
		return b
	}
	at := len(b)
	b = pcie.AppendTable(b, call, t.part.Plan.SlotBytes, t.part.Segs)
	return append(b, make([]byte, at+pcie.TableBytes-len(b))...)
}

// The receiving side of a call's PCIe share: the done message's length,
// and, after the done handshake, the H2D copies out of the peers' staging
// buffers, each slot after the sender's slot event (share.go says why
// that is enough).

// DoneLen is the length of the share's part of peer j's done message to
// this rank: the staging table when it announced one (after the plane's
// call number).
func (x *Share) DoneLen(j int) int {
	if r := x.Rx(j); r != nil && r.expect {
		return pcie.TableBytes
	}
	return 0
}

// Receive, after the done handshake, copies every announced PCIe part out
// of the peers' staging buffers into recv (done[j]: peer j's done
// message): per slot, the copy stream waits on the sender's slot event,
// then copies H2D; s then waits for the copies.
func (x *Share) Receive(s *gpu.Stream, recv *gpu.Buffer, done [][]byte, peers []int) error {
	for _, j := range peers {
		r := x.Rx(j)
		if r != nil && r.probe.state == probeArmed && !r.expect {
			r.probe.state = probePending // a rider part alone was timed
		}
		if r == nil || !r.expect {
			continue
		}
		r.expect = false
		sb, segs, err := x.ParseTable(j, done[j], r, recv)
		if err != nil {
			return err
		}
		call := binary.LittleEndian.Uint64(done[j])
		if f := x.OnSplit; f != nil {
			f(SplitRec{From: j, To: x.Me, Call: call, Receiver: true, SlotBytes: sb, Segs: segs})
		}
		if err := x.unstage(j, r, recv, sb, segs, call); err != nil {
			return err
		}
		if err := x.probeReceived(r); err != nil {
			return err
		}
		if err := r.Stream.Record(r.End); err != nil {
			return err
		}
		if err := s.Wait(r.End); err != nil {
			return err
		}
	}
	return nil
}

// unstage enqueues the H2D copies of one peer's staging table.
func (x *Share) unstage(j int, r *Rx, recv *gpu.Buffer, sb int, segs []pcie.Seg, call uint64) error {
	mem := r.Mem.Bytes()
	slot, soff := -1, 0
	for _, sg := range segs {
		for pos := 0; pos < sg.N; {
			k := soff / sb
			if k != slot {
				if err := r.Stream.Wait(r.Slots[k]); err != nil {
					return err
				}
				x.note(Trace{Owner: j, To: x.Me, Slot: k, Call: call, Wait: true})
				slot = k
			}
			if f := x.Fault; f != nil {
				if err := f("h2d", j); err != nil {
					return fmt.Errorf("pcie part from rank %d: %w", j, err)
				}
			}
			m := min(sg.N-pos, (k+1)*sb-soff)
			if err := r.Stream.CopyHtoD(recv.Sub(sg.Off+pos, m), mem[soff:soff+m]); err != nil {
				return fmt.Errorf("pcie part from rank %d: %w", j, err)
			}
			pos += m
			soff += m
		}
	}
	return nil
}

// ParseTable reads and checks peer j's staging table m (pcie.ParseTable:
// every piece inside recv and the staging buffer, in at most pcie.Slots
// slots). A table that does not fit is a protocol error, never a partial
// copy.
func (x *Share) ParseTable(j int, m []byte, r *Rx, recv *gpu.Buffer) (int, []pcie.Seg, error) {
	sb, segs, err := pcie.ParseTable(m, recv.Len(), r.Mem.Len())
	if err != nil {
		return 0, nil, fmt.Errorf("rank %d on %s sent a pcie staging table that %w: %w", j, x.Host.PeerHost(j), err, errs.ErrMismatch)
	}
	return sb, segs, nil
}

// AppendSeg adds the staged range [off, off+n) of a push to segs, merging
// it into the last segment when it continues it.
func AppendSeg(segs []pcie.Seg, off, n int) []pcie.Seg {
	if k := len(segs) - 1; k >= 0 && segs[k].Off+segs[k].N == off {
		segs[k].N += n
		return segs
	}
	return append(segs, pcie.Seg{Off: off, N: n})
}
