package direct

import (
	"encoding/binary"
	"fmt"

	"flexlink/collectives/plane"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// The receiving side of a call's PCIe share: the done message's length,
// and, after the done handshake, the H2D copies out of the peers' staging
// buffers, each slot after the sender's slot event (gpu_pcie.go says why
// that is enough).

// doneLen is the length of peer j's done message to this rank: its call
// number, plus the staging table when it announced one.
func (p *directPlane) doneLen(j int) int {
	if r := p.rxFrom(j); r != nil && r.expect {
		return pcieTableHeader + pcieMaxSegs*16
	}
	return 8
}

// pcieReceive, after the done handshake, copies every announced PCIe part
// out of the peers' staging buffers into recv: per slot, the copy stream
// waits on the sender's slot event, then copies H2D; s then waits for the
// copies. Then it publishes the call's link statistics.
func (p *directPlane) pcieReceive(s *gpu.Stream, o *plane.Op, in [][]byte, peers []int) error {
	for _, j := range peers {
		r := p.rxFrom(j)
		if r == nil || !r.expect {
			continue
		}
		r.expect = false
		sb, segs, err := p.parseTable(j, in[j], r, o.Recv)
		if err != nil {
			return err
		}
		call := binary.LittleEndian.Uint64(in[j])
		if f := p.px.onSplit; f != nil {
			f(pcieSplitRec{from: j, to: p.me, call: call, receiver: true, slotBytes: sb, segs: segs})
		}
		if err := p.unstage(j, r, o.Recv, sb, segs, call); err != nil {
			return err
		}
		if err := p.probeReceived(r); err != nil {
			return err
		}
		if err := r.stream.Record(r.end); err != nil {
			return err
		}
		if err := s.Wait(r.end); err != nil {
			return err
		}
	}
	p.endStats()
	return nil
}

// unstage enqueues the H2D copies of one peer's staging table.
func (p *directPlane) unstage(j int, r *pcieRx, recv *gpu.Buffer, sb int, segs []pcieSeg, call uint64) error {
	mem := r.mem.Bytes()
	slot, soff := -1, 0
	for _, sg := range segs {
		for pos := 0; pos < sg.n; {
			k := soff / sb
			if k != slot {
				if err := r.stream.Wait(r.slots[k]); err != nil {
					return err
				}
				p.note(traceRec{actor: p.me, owner: j, to: p.me, chunk: -2 - k, call: call, wait: true})
				slot = k
			}
			if f := p.px.fault; f != nil {
				if err := f("h2d", j); err != nil {
					return fmt.Errorf("pcie part from rank %d: %w", j, err)
				}
			}
			m := min(sg.n-pos, (k+1)*sb-soff)
			if err := r.stream.CopyHtoD(recv.Sub(sg.off+pos, m), mem[soff:soff+m]); err != nil {
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
func (p *directPlane) parseTable(j int, m []byte, r *pcieRx, recv *gpu.Buffer) (int, []pcieSeg, error) {
	le := binary.LittleEndian
	sb, n := int(le.Uint64(m[8:])), int(le.Uint64(m[16:]))
	bad := func(why string, a ...any) error {
		return fmt.Errorf("rank %d on %s sent a pcie staging table that %s: %w", j, p.c.PeerHost(j), fmt.Sprintf(why, a...), errs.ErrMismatch)
	}
	if n > pcieMaxSegs {
		return 0, nil, bad("has %d entries (at most %d)", n, pcieMaxSegs)
	}
	if n > 0 && (sb <= 0 || sb > r.mem.Len()) {
		return 0, nil, bad("has slots of %d bytes", sb)
	}
	segs := make([]pcieSeg, n)
	total := 0
	for i := range segs {
		e := m[pcieTableHeader+16*i:]
		sg := pcieSeg{off: int(le.Uint64(e)), n: int(le.Uint64(e[8:]))}
		if sg.off < 0 || sg.n <= 0 || sg.off > recv.Len()-sg.n {
			return 0, nil, bad("puts %d bytes at offset %d of a %d-byte buffer", sg.n, sg.off, recv.Len())
		}
		total += sg.n
		segs[i] = sg
	}
	if total > r.mem.Len() || n > 0 && (total+sb-1)/sb > pcieSlots {
		return 0, nil, bad("stages %d bytes in slots of %d (staging %d bytes, %d slots)", total, sb, r.mem.Len(), pcieSlots)
	}
	return sb, segs, nil
}
