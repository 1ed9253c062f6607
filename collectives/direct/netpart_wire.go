package direct

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/pause"
)

// The wire of a call's net parts (netpart.go): after the work, every rank
// sends its parts and receives its peers' at once. The loop polls slot
// events and requests and blocks on none, so no rank waits for another's
// order; the only wait that depends on the GPU is a slot's D2H, which
// depends on work already enqueued everywhere (the peers' ready events),
// never on a host's progress in this call.
//
// A pair's messages per call: the staging table (call, slot bytes,
// entries, then offset and length in the receiver's recv per entry), then
// one message per slot, in order.

// Message tags of the net part: a kind in bits 16-19 and an index (slot,
// probe) below, so every tag fits the 20 bits the narrowest provider (ucx)
// carries; offer checks the provider's width (the connection layer,
// fabric/net/hello, with net.CheckTags). The hello and its confirmation
// are kind 1 (netHelloTag).
const (
	netTagTable = uint64(2 << 16)
	netTagSlot  = uint64(3 << 16) // | slot, below pcie.Slots
	netTagProbe = uint64(4 << 16) // | probe, below netProbes
	netTagMax   = netTagProbe | (1<<16 - 1)
)

// netSend is one call's net part toward a peer on the wire.
type netSend struct {
	j           int
	t           *netTx
	hdr         []byte
	slots, next int // slots to send; the next to send
	reqs        []net.Request
	done        bool
}

// netRecv is one call's net part from a peer on the wire.
type netRecv struct {
	j      int
	r      *netRx
	pr     *rxProbe // the pair's probe: its end is timed when armed
	hdr    []byte
	hreq   net.Request
	sb     int
	segs   []pcieSeg
	reqs   []net.Request // one per slot, once the table is in
	next   int           // the next slot to copy H2D
	cur    [3]int        // H2D cursor: entry, bytes of it done, staging offset
	posted bool
	done   bool
}

// run moves this call's net parts over the wire (after the PCIe part's
// finish, before the done handshake): sends toward every peer with a
// planned part, receives from every peer that announced one, H2D into recv
// as slots land; s then waits for the D2H and H2D copies. On error every
// connection of the part is aborted.
func (x *netState) run(ctx context.Context, s *gpu.Stream, recv *gpu.Buffer, px *pcieState, peers []int) error {
	if x == nil {
		return nil
	}
	var sends []*netSend
	var recvs []*netRecv
	for _, j := range peers {
		if t := px.txTo(j); t != nil && x.planned(t) {
			sends = append(sends, &netSend{j: j, t: t.net})
		}
		if r := px.rxFrom(j); r != nil && x.expects(r) {
			r.net.expect = false
			recvs = append(recvs, &netRecv{j: j, r: r.net, pr: &r.probe})
		}
	}
	if len(sends)+len(recvs) == 0 {
		return nil
	}
	ctx, cancel := x.jobCtx(ctx)
	defer cancel()
	err := x.wire(ctx, s, recv, px.call, sends, recvs)
	if err != nil {
		x.abort(px.tx, px.rx, err)
	}
	return err
}

func (x *netState) wire(ctx context.Context, s *gpu.Stream, recv *gpu.Buffer, call uint64, sends []*netSend, recvs []*netRecv) error {
	for _, sd := range sends {
		if err := x.startSend(s, sd, call); err != nil {
			return x.wireErr("toward", sd.j, err)
		}
	}
	left := len(sends) + len(recvs)
	for idle := 0; left > 0; {
		progress := false
		for _, sd := range sends {
			if sd.done {
				continue
			}
			p, err := x.stepSend(sd)
			if err != nil {
				return x.wireErr("toward", sd.j, err)
			}
			progress = progress || p
			if sd.done {
				left--
			}
		}
		for _, rc := range recvs {
			if rc.done {
				continue
			}
			p, err := x.stepRecv(s, recv, rc)
			if err != nil {
				return x.wireErr("from", rc.j, err)
			}
			progress = progress || p
			if rc.done {
				left--
			}
		}
		if progress || left == 0 {
			idle = 0
			continue
		}
		if ctx.Err() != nil {
			return x.stalled(sends, recvs, ctx.Err())
		}
		idle++
		switch {
		case idle < 64:
		case idle < 1024:
			runtime.Gosched()
		default:
			pause.Sleep(20 * time.Microsecond)
		}
	}
	return nil
}

// wireErr names the peer and the link of a failed net part.
func (x *netState) wireErr(dir string, j int, err error) error {
	return fmt.Errorf("gpu net part %s rank %d on %s over net (%s): %w", dir, j, x.c.PeerHost(j), x.nic(), err)
}

// stalled is the error of a wire loop whose context ended (the call's
// deadline, or the job's abort, whose reason it carries).
func (x *netState) stalled(sends []*netSend, recvs []*netRecv, err error) error {
	var to, from []int
	for _, sd := range sends {
		if !sd.done {
			to = append(to, sd.j)
		}
	}
	for _, rc := range recvs {
		if !rc.done {
			from = append(from, rc.j)
		}
	}
	if jerr := x.c.JobErr(); jerr != nil {
		err = jerr
	}
	return fmt.Errorf("gpu net part over net (%s) unfinished toward ranks %v and from ranks %v: %w", x.nic(), to, from, err)
}

// startSend seals the part toward sd's peer (the last slot's event, the
// D2H stream joined into s) and posts its staging table (with call, this
// rank's call number, for the tests' logs).
func (x *netState) startSend(s *gpu.Stream, sd *netSend, call uint64) error {
	nt := sd.t
	nt.sealed = true
	if nt.used {
		if err := nt.Stream.Record(nt.Slots[nt.slot]); err != nil {
			return err
		}
		if err := nt.Stream.Record(nt.End); err != nil {
			return err
		}
		if err := s.Wait(nt.End); err != nil {
			return err
		}
		nt.used = false
	}
	sd.slots = (nt.staged + nt.slotBytes - 1) / nt.slotBytes
	if f := x.onSplit; f != nil {
		f(pcieSplitRec{from: x.me, to: sd.j, call: call, slotBytes: nt.slotBytes, segs: append([]pcieSeg(nil), nt.segs...),
			bytes: nt.bytes, pushed: nt.pushed})
	}
	if f := x.fault; f != nil {
		if err := f("send", sd.j); err != nil {
			return err
		}
	}
	le := binary.LittleEndian
	b := le.AppendUint64(nil, call)
	b = le.AppendUint64(b, uint64(nt.slotBytes))
	b = le.AppendUint64(b, uint64(len(nt.segs)))
	for _, sg := range nt.segs {
		b = le.AppendUint64(b, uint64(sg.Off))
		b = le.AppendUint64(b, uint64(sg.N))
	}
	sd.hdr = b
	req, err := nt.conn.ISend(sd.hdr, netTagTable, nil)
	if err != nil {
		return err
	}
	sd.reqs = append(sd.reqs, req)
	return nil
}

// stepSend posts every slot whose D2H has finished and collects finished
// sends; it reports progress.
func (x *netState) stepSend(sd *netSend) (progress bool, err error) {
	nt := sd.t
	for sd.next < sd.slots {
		fin, err := nt.Slots[sd.next].Done()
		if err != nil {
			return false, err
		}
		if !fin {
			break
		}
		if f := x.fault; f != nil {
			if err := f("slot", sd.j); err != nil {
				return false, err
			}
		}
		lo := sd.next * nt.slotBytes
		req, err := nt.conn.ISend(nt.Mem.Bytes()[lo:min(lo+nt.slotBytes, nt.staged)], netTagSlot|uint64(sd.next), nil)
		if err != nil {
			return false, err
		}
		sd.reqs = append(sd.reqs, req)
		sd.next++
		progress = true
	}
	for len(sd.reqs) > 0 {
		fin, _, err := sd.reqs[0].Test()
		if err != nil {
			return false, err
		}
		if !fin {
			break
		}
		sd.reqs = sd.reqs[1:]
		progress = true
	}
	sd.done = sd.next == sd.slots && len(sd.reqs) == 0
	return progress, nil
}

// stepRecv advances the part from rc's peer: post the table's receive once
// the staging is free, then the slots' receives, then each slot's H2D as
// it lands; at the end s waits for the copies.
func (x *netState) stepRecv(s *gpu.Stream, recv *gpu.Buffer, rc *netRecv) (progress bool, err error) {
	r := rc.r
	if !rc.posted {
		if r.busy { // the last call's H2D copies out of the staging
			fin, err := r.End.Done()
			if err != nil || !fin {
				return false, err
			}
			r.busy = false
		}
		rc.hdr = make([]byte, pcieTableHeader+pcieMaxSegs*16)
		rc.hreq, err = r.conn.IRecv([][]byte{rc.hdr}, []uint64{netTagTable}, nil)
		rc.posted = true
		return true, err
	}
	if rc.reqs == nil {
		fin, sizes, err := rc.hreq.Test()
		if err != nil || !fin {
			return false, err
		}
		if err := x.parseTable(rc, sizes[0], recv); err != nil {
			return false, err
		}
		if err := r.Stream.Wait(x.start); err != nil {
			return false, err
		}
		total := rc.total()
		rc.reqs = []net.Request{}
		mem := r.Mem.Bytes()
		for lo := 0; lo < total; lo += rc.sb {
			req, err := r.conn.IRecv([][]byte{mem[lo:min(lo+rc.sb, total)]}, []uint64{netTagSlot | uint64(lo/rc.sb)}, nil)
			if err != nil {
				return false, err
			}
			rc.reqs = append(rc.reqs, req)
		}
		progress = true
	}
	for rc.next < len(rc.reqs) {
		fin, sizes, err := rc.reqs[rc.next].Test()
		if err != nil {
			return false, err
		}
		if !fin {
			break
		}
		if want := min(rc.sb, rc.total()-rc.next*rc.sb); sizes[0] != want {
			return false, fmt.Errorf("slot %d of %d bytes, want %d: %w", rc.next, sizes[0], want, errs.ErrMismatch)
		}
		if err := x.unstage(rc, recv); err != nil {
			return false, err
		}
		rc.next++
		progress = true
	}
	if rc.next < len(rc.reqs) {
		return progress, nil
	}
	return true, x.endRecv(s, rc)
}

// total is the bytes the table stages.
func (rc *netRecv) total() int {
	n := 0
	for _, sg := range rc.segs {
		n += sg.N
	}
	return n
}

// unstage enqueues the H2D copies of slot rc.next into recv.
func (x *netState) unstage(rc *netRecv, recv *gpu.Buffer) error {
	if f := x.fault; f != nil {
		if err := f("h2d", rc.j); err != nil {
			return err
		}
	}
	r, mem := rc.r, rc.r.Mem.Bytes()
	end := (rc.next + 1) * rc.sb
	for e, pos, soff := rc.cur[0], rc.cur[1], rc.cur[2]; e < len(rc.segs) && soff < end; {
		sg := rc.segs[e]
		m := min(sg.N-pos, end-soff)
		if err := r.Stream.CopyHtoD(recv.Sub(sg.Off+pos, m), mem[soff:soff+m]); err != nil {
			return err
		}
		pos, soff = pos+m, soff+m
		if pos == sg.N {
			e, pos = e+1, 0
		}
		rc.cur = [3]int{e, pos, soff}
	}
	return nil
}

// endRecv, after the last slot's H2D, times the part when the pair's probe
// is armed, joins the H2D stream into s and marks the staging busy.
func (x *netState) endRecv(s *gpu.Stream, rc *netRecv) error {
	r := rc.r
	rc.done = true
	if f := x.onSplit; f != nil {
		f(pcieSplitRec{from: rc.j, to: x.me, call: binary.LittleEndian.Uint64(rc.hdr), receiver: true, slotBytes: rc.sb, segs: rc.segs})
	}
	if rc.pr.state == probeArmed {
		if r.end == nil {
			r.end, _ = x.peers.dev.NewEvent(true) // no event: the part goes untimed and the sender drops the sample
		}
		if r.end != nil {
			if err := r.Stream.Record(r.end); err != nil {
				return err
			}
			r.timed = true
		}
	}
	if err := r.Stream.Record(r.End); err != nil {
		return err
	}
	r.busy = true
	return s.Wait(r.End)
}

// parseTable reads and checks the staging table of n bytes in rc.hdr: every
// piece inside recv and the staging, in at most pcie.Slots slots. A table
// that does not fit is a protocol error, never a partial copy.
func (x *netState) parseTable(rc *netRecv, n int, recv *gpu.Buffer) error {
	le := binary.LittleEndian
	m := rc.hdr[:n]
	bad := func(why string, a ...any) error {
		return fmt.Errorf("rank %d sent a net staging table that %s: %w", rc.j, fmt.Sprintf(why, a...), errs.ErrMismatch)
	}
	if n < pcieTableHeader {
		return bad("has %d bytes", n)
	}
	sb, k := int(le.Uint64(m[8:])), int(le.Uint64(m[16:]))
	if k > pcieMaxSegs || n != pcieTableHeader+16*k {
		return bad("has %d entries in %d bytes (at most %d)", k, n, pcieMaxSegs)
	}
	staging := rc.r.Mem.Len()
	if k > 0 && (sb <= 0 || sb > staging) {
		return bad("has slots of %d bytes", sb)
	}
	rc.sb, rc.segs = sb, make([]pcieSeg, k)
	total := 0
	for i := range rc.segs {
		e := m[pcieTableHeader+16*i:]
		sg := pcieSeg{Off: int(le.Uint64(e)), N: int(le.Uint64(e[8:]))}
		if sg.Off < 0 || sg.N <= 0 || recv == nil || sg.Off > recv.Len()-sg.N {
			return bad("puts %d bytes at offset %d of the recv buffer", sg.N, sg.Off)
		}
		total += sg.N
		rc.segs[i] = sg
	}
	if total > staging || k > 0 && (total+sb-1)/sb > pcie.Slots {
		return bad("stages %d bytes in slots of %d (staging %d bytes, %d slots)", total, sb, staging, pcie.Slots)
	}
	return nil
}
