package direct

import (
	"encoding/binary"
	"fmt"

	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// One call's PCIe share, in the order do() runs it (the protocol and why
// it is safe are in pcie.go):
//
//	settle, links, feed back finished probes; the pairs' links and
//	shares         planner shares for the call's split (split.go)
//	begin          take each peer's split (before the ready message)
//	readyWords     announce it in the ready message
//	ready          read the peers' announcements; start timings
//	stage          during the work (the plane's pushSplit): head on the
//	               copy lanes, tail staged D2H
//	finish         after the work: record the last slot, join the D2H streams
//	doneMessage    the staging table for the receiver
//	doneLen,       after the done handshake: H2D out of the peers' staging
//	receive        (the receiving side, below)

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

// settle, before a call's split is planned, feeds back every finished
// probe toward the call's peers, so the shares the split asks for see it.
func (x *pcieState) settle(peers []int) {
	for _, j := range peers {
		if t := x.txTo(j); t != nil {
			x.probeSettle(t)
		}
	}
}

// links is, by peer, the staged links this rank's pair toward it has
// (planCall's Links; nil when no pair has PCIe).
func (x *pcieState) links() []pairLinks {
	if x.tx == nil {
		return nil
	}
	out := make([]pairLinks, x.n)
	for j, t := range x.tx {
		if t != nil {
			out[j] = pairLinks{PCIe: true, Net: t.net != nil}
		}
	}
	return out
}

// shares is the pair planner's PCIe and net fractions of a push of b
// bytes toward peer j (planCall's sharesFunc).
func (x *pcieState) shares(j, b int) (pc, nt float64) {
	for _, sh := range x.tx[j].planner.Shares(b) {
		switch sh.Link {
		case linkPCIe:
			pc = sh.Fraction
		case linkNet:
			nt = sh.Fraction
		}
	}
	return pc, nt
}

// begin takes call's split (planCall) toward every peer: the sizes of the
// PCIe and net parts, the probes armed and the shares logged.
func (x *pcieState) begin(peers []int, call uint64, cp *callPlan) error {
	x.call, x.plan = call, cp
	if x.tx == nil {
		return nil
	}
	b := cp.Bytes
	for _, j := range peers {
		t := x.tx[j]
		if t == nil {
			continue
		}
		ps := &cp.To[j]
		t.txCall = txCall{bytes: b, slot: -1, segs: t.segs[:0]}
		x.nx.begin(t, b, ps.Net)
		if b == 0 {
			continue
		}
		t.plan, t.capBytes, t.slotBytes = ps.PCIe.Bytes, ps.PCIe.Cap, ps.PCIe.SlotBytes
		x.probeArm(t)
		if t.plan > 0 || b >= t.planner.Threshold() {
			by := "FLEXLINK_PCIE_SHARE"
			if x.fixed < 0 {
				by = "balancer"
			}
			x.logShare(t, by)
		}
	}
	return nil
}

// pushed is the bytes the call's pushes have carried toward t's peer so
// far.
func (x *pcieState) pushed(t *pcieTx) int { return x.plan.To[t.peer].pushed }

// readyWords writes the PCIe words of this rank's ready message to
// peer j (see direct.go): announce, timed-push sequence number,
// and the report on j's last timed push to this rank; then the net words
// that follow them (netpart_call.go).
func (x *pcieState) readyWords(j int, w []byte) {
	le := binary.LittleEndian
	t := x.txTo(j)
	if t != nil && t.plan > 0 {
		le.PutUint64(w[0:], 1)
	}
	if t != nil && t.probe.s.Armed() && t.probe.s.Remote() {
		le.PutUint64(w[8:], t.probe.s.Seq())
	}
	var netNs uint64
	if r := x.rxFrom(j); r != nil {
		seq, ns, nns := x.probeReport(r)
		le.PutUint64(w[16:], seq)
		le.PutUint64(w[24:], ns)
		netNs = nns
	}
	x.nx.readyWords(t, w[pcieWords:], netNs)
}

func (x *pcieState) txTo(j int) *pcieTx {
	if x.tx == nil {
		return nil
	}
	return x.tx[j]
}

func (x *pcieState) rxFrom(j int) *pcieRx {
	if x.rx == nil {
		return nil
	}
	return x.rx[j]
}

// ready reads the PCIe words of the peers' ready messages and, on s
// (which now waits on every peer's ready event), starts this call's
// timings.
func (x *pcieState) ready(s *gpu.Stream, in [][]byte, peers []int) error {
	le := binary.LittleEndian
	for _, j := range peers {
		w := in[j][pcieAt:readyHeader]
		r := x.rxFrom(j)
		if err := x.nx.ready(j, x.txTo(j), r, w[pcieWords:]); err != nil {
			return err
		}
		if r == nil {
			if le.Uint64(w) != 0 {
				return fmt.Errorf("rank %d on %s announces a pcie part, but this rank has no mapping of its staging buffer: %w",
					j, x.c.PeerHost(j), errs.ErrMismatch)
			}
		} else {
			r.expect = le.Uint64(w) == 1
			if seq := le.Uint64(w[8:]); seq != 0 && (r.expect || x.nx.expects(r)) {
				r.probe.seq, r.probe.state = seq, probeArmed
			}
		}
		if t := x.txTo(j); t != nil {
			x.probeReported(t, le.Uint64(w[16:]), le.Uint64(w[24:]), x.nx.report(t))
		}
	}
	if err := x.nx.startOn(s, x.rx, peers); err != nil {
		return err
	}
	return x.probeStart(s, peers)
}

// stage copies src D2H into the staging buffer toward j, slot by slot,
// recording a slot's event when the copies move past it, and notes where
// the bytes go (off in j's recv).
func (x *pcieState) stage(j, off int, src *gpu.Buffer, after *gpu.Event) error {
	t := x.tx[j]
	if t.sealed {
		return fmt.Errorf("rank %d: pcie part toward rank %d staged after the call's copies were joined (a bug)", x.me, j)
	}
	if f := x.fault; f != nil {
		if err := f("d2h", j); err != nil {
			return fmt.Errorf("pcie part toward rank %d: %w", j, err)
		}
	}
	if after != nil {
		if err := t.Stream.Wait(after); err != nil {
			return err
		}
	}
	mem := t.Mem.Bytes()
	for pos := 0; pos < src.Len(); {
		k := t.staged / t.slotBytes
		if k != t.slot {
			if err := x.recordSlot(t); err != nil {
				return err
			}
			t.slot = k
		}
		m := min(src.Len()-pos, (k+1)*t.slotBytes-t.staged)
		if err := t.Stream.CopyDtoH(mem[t.staged:t.staged+m], src.Sub(pos, m)); err != nil {
			return fmt.Errorf("pcie part toward rank %d: %w", j, err)
		}
		pos += m
		t.staged += m
	}
	t.segs = appendSeg(t.segs, off, src.Len())
	t.used = true
	x.stats.add(linkPCIe, src.Len())
	return nil
}

// recordSlot records the event of the slot t is filling, if any.
func (x *pcieState) recordSlot(t *pcieTx) error {
	if t.slot < 0 {
		return nil
	}
	x.note(traceRec{actor: x.me, owner: x.me, to: t.peer, chunk: -2 - t.slot, call: x.call})
	return t.Stream.Record(t.Slots[t.slot])
}

// finish, after the work, records the last slot of every peer's PCIe
// part and makes s wait for the D2H copies (they read this rank's send
// buffer, which the caller may reuse once s passes the call).
func (x *pcieState) finish(s *gpu.Stream) error {
	for _, t := range x.tx {
		if t == nil || t.sealed {
			continue
		}
		t.sealed = true
		if !t.used {
			continue
		}
		if err := x.recordSlot(t); err != nil {
			return err
		}
		t.slot, t.used = -1, false
		if err := t.Stream.Record(t.End); err != nil {
			return err
		}
		if err := s.Wait(t.End); err != nil {
			return err
		}
		if f := x.onSplit; f != nil {
			f(pcieSplitRec{from: x.me, to: t.peer, call: x.call, slotBytes: t.slotBytes,
				segs: append([]pcieSeg(nil), t.segs...), bytes: t.bytes, pushed: x.pushed(t)})
		}
	}
	x.probeDone()
	return nil
}

const pcieTableHeader = pcie.TableHeader // call, slot bytes, entries

// doneMessage appends this rank's done message to peer j to b: the call
// number and, when this rank announced a PCIe part to j, the staging
// table: slot size, entries, then (offset in j's recv, length) per entry,
// padded to pcieMaxSegs entries so that j, which knows only that a table
// comes, can post its receive with the exact length.
func (x *pcieState) doneMessage(j int, call uint64, b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, call)
	t := x.txTo(j)
	if t == nil || t.plan == 0 {
		return b
	}
	b = le.AppendUint64(b, uint64(t.slotBytes))
	b = le.AppendUint64(b, uint64(len(t.segs)))
	for _, sg := range t.segs {
		b = le.AppendUint64(b, uint64(sg.Off))
		b = le.AppendUint64(b, uint64(sg.N))
	}
	return append(b, make([]byte, pcieTableHeader+pcieMaxSegs*16-len(b))...)
}

// The receiving side of a call's PCIe share: the done message's length,
// and, after the done handshake, the H2D copies out of the peers' staging
// buffers, each slot after the sender's slot event (pcie.go says why
// that is enough).

// doneLen is the length of peer j's done message to this rank: its call
// number, plus the staging table when it announced one.
func (x *pcieState) doneLen(j int) int {
	if r := x.rxFrom(j); r != nil && r.expect {
		return pcieTableHeader + pcieMaxSegs*16
	}
	return 8
}

// receive, after the done handshake, copies every announced PCIe part out
// of the peers' staging buffers into recv: per slot, the copy stream waits
// on the sender's slot event, then copies H2D; s then waits for the copies.
func (x *pcieState) receive(s *gpu.Stream, recv *gpu.Buffer, in [][]byte, peers []int) error {
	for _, j := range peers {
		r := x.rxFrom(j)
		if r != nil && r.probe.state == probeArmed && !r.expect {
			r.probe.state = probePending // a net part alone was timed (netpart_wire.go)
		}
		if r == nil || !r.expect {
			continue
		}
		r.expect = false
		sb, segs, err := x.parseTable(j, in[j], r, recv)
		if err != nil {
			return err
		}
		call := binary.LittleEndian.Uint64(in[j])
		if f := x.onSplit; f != nil {
			f(pcieSplitRec{from: j, to: x.me, call: call, receiver: true, slotBytes: sb, segs: segs})
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
func (x *pcieState) unstage(j int, r *pcieRx, recv *gpu.Buffer, sb int, segs []pcieSeg, call uint64) error {
	mem := r.Mem.Bytes()
	slot, soff := -1, 0
	for _, sg := range segs {
		for pos := 0; pos < sg.N; {
			k := soff / sb
			if k != slot {
				if err := r.Stream.Wait(r.Slots[k]); err != nil {
					return err
				}
				x.note(traceRec{actor: x.me, owner: j, to: x.me, chunk: -2 - k, call: call, wait: true})
				slot = k
			}
			if f := x.fault; f != nil {
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

// parseTable reads and checks peer j's staging table: every piece must lie
// inside recv and the staging buffer, in at most pcieSlots slots. A table
// that does not fit is a protocol error, never a partial copy.
func (x *pcieState) parseTable(j int, m []byte, r *pcieRx, recv *gpu.Buffer) (int, []pcieSeg, error) {
	le := binary.LittleEndian
	sb, n := int(le.Uint64(m[8:])), int(le.Uint64(m[16:]))
	bad := func(why string, a ...any) error {
		return fmt.Errorf("rank %d on %s sent a pcie staging table that %s: %w", j, x.c.PeerHost(j), fmt.Sprintf(why, a...), errs.ErrMismatch)
	}
	if n > pcieMaxSegs {
		return 0, nil, bad("has %d entries (at most %d)", n, pcieMaxSegs)
	}
	if n > 0 && (sb <= 0 || sb > r.Mem.Len()) {
		return 0, nil, bad("has slots of %d bytes", sb)
	}
	segs := make([]pcieSeg, n)
	total := 0
	for i := range segs {
		e := m[pcieTableHeader+16*i:]
		sg := pcieSeg{Off: int(le.Uint64(e)), N: int(le.Uint64(e[8:]))}
		if sg.Off < 0 || sg.N <= 0 || sg.Off > recv.Len()-sg.N {
			return 0, nil, bad("puts %d bytes at offset %d of a %d-byte buffer", sg.N, sg.Off, recv.Len())
		}
		total += sg.N
		segs[i] = sg
	}
	if total > r.Mem.Len() || n > 0 && (total+sb-1)/sb > pcieSlots {
		return 0, nil, bad("stages %d bytes in slots of %d (staging %d bytes, %d slots)", total, sb, r.Mem.Len(), pcieSlots)
	}
	return sb, segs, nil
}

// appendSeg adds the staged range [off, off+n) of a push to segs, merging
// it into the last segment when it continues it.
func appendSeg(segs []pcieSeg, off, n int) []pcieSeg {
	if k := len(segs) - 1; k >= 0 && segs[k].Off+segs[k].N == off {
		segs[k].N += n
		return segs
	}
	return append(segs, pcieSeg{Off: off, N: n})
}
