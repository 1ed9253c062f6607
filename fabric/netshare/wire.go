package netshare

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/pause"
)

// The wire of a call's net parts (share.go): after the work, every rank
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
// are kind 1 (helloTag).
const (
	tagTable = uint64(2 << 16)
	TagSlot  = uint64(3 << 16) // | slot, below pcie.Slots
	tagProbe = uint64(4 << 16) // | probe, below probes
	tagMax   = tagProbe | (1<<16 - 1)
)

// wireSend is one call's net part toward a peer on the wire.
type wireSend struct {
	j           int
	t           *txSide
	pushed      int // bytes the call's pushes carried toward the peer (for onSplit)
	hdr         []byte
	slots, next int // slots to send; the next to send
	reqs        []net.Request
	done        bool
}

// wireRecv is one call's net part from a peer on the wire.
type wireRecv struct {
	j      int
	r      *rxSide
	pr     *pcieshare.Rx // the pair's PCIe side: the net part's end is timed when its probe is armed
	hdr    []byte
	hreq   net.Request
	sb     int
	segs   []pcie.Seg
	reqs   []net.Request // one per slot, once the table is in
	next   int           // the next slot to copy H2D
	cur    [3]int        // H2D cursor: entry, bytes of it done, staging offset
	posted bool
	done   bool
}

// Send moves this call's net parts over the wire (after the PCIe share's
// Complete, before the done handshake): sends toward every peer with a
// planned part, receives from every peer that announced one, H2D into recv
// as slots land; s then waits for the D2H and H2D copies. On error every
// connection of the part is aborted once the communicator has ended
// (abortLater).
func (x *Share) Send(ctx context.Context, s *gpu.Stream, recv *gpu.Buffer, peers []int) error {
	var sends []*wireSend
	var recvs []*wireRecv
	for _, j := range peers {
		if nt := x.tx[j]; nt != nil && nt.Planned() {
			sends = append(sends, &wireSend{j: j, t: nt, pushed: x.plan.Pushed(j)})
		}
		if r := x.rx[j]; r != nil && r.expect {
			r.expect = false
			recvs = append(recvs, &wireRecv{j: j, r: r, pr: x.PCIe.Rx(j)})
		}
	}
	if len(sends)+len(recvs) == 0 {
		return nil
	}
	ctx, cancel := x.jobCtx(ctx)
	defer cancel()
	err := x.wire(ctx, s, recv, x.PCIe.Call(), sends, recvs)
	if err != nil {
		x.abortLater(err)
	}
	return err
}

// abortWait bounds how long a failed call leaves the part's connections
// open for the communicator's end to come first (abortLater).
const abortWait = 3 * time.Second

// abortLater aborts every connection of the part once the communicator
// has ended (this rank publishes why, after its wait for the root cause,
// see internal/comm), or after abortWait. Aborting at once would fail the
// peers on a reset that names this rank's link, racing the published
// reason that names the rank really lost; the peers' waits end with the
// communicator anyway (jobCtx).
func (x *Share) abortLater(err error) {
	stop, ok := x.late.start()
	if !ok {
		return // Close is closing the connections
	}
	go func() {
		defer x.late.wg.Done()
		t := time.NewTimer(abortWait)
		defer t.Stop()
		select {
		case <-x.Host.JobDone():
		case <-t.C:
		case <-stop:
		}
		x.abort(err)
	}()
}

// lateAbort tracks the aborts abortLater holds back, so that Close runs
// them before it closes the connections.
type lateAbort struct {
	mu      sync.Mutex
	stop    chan struct{} // closed by flush
	flushed bool          // Close has begun: no more held-back aborts
	wg      sync.WaitGroup
}

// start counts one held-back abort and returns the channel that ends its
// wait; ok is false once flush has run (Close closes the connections).
func (l *lateAbort) start() (stop <-chan struct{}, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flushed {
		return nil, false
	}
	if l.stop == nil {
		l.stop = make(chan struct{})
	}
	l.wg.Add(1)
	return l.stop, true
}

// flush ends every held-back abort's wait and waits for it to finish; no
// abort is held back after it.
func (l *lateAbort) flush() {
	l.mu.Lock()
	l.flushed = true
	if l.stop != nil {
		close(l.stop)
		l.stop = nil
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (x *Share) wire(ctx context.Context, s *gpu.Stream, recv *gpu.Buffer, call uint64, sends []*wireSend, recvs []*wireRecv) error {
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
func (x *Share) wireErr(dir string, j int, err error) error {
	return fmt.Errorf("gpu net part %s rank %d on %s over net (%s): %w", dir, j, x.Host.PeerHost(j), x.nicName(), err)
}

// stalled is the error of a wire loop whose context ended (the call's
// deadline, or the job's abort, whose reason it carries).
func (x *Share) stalled(sends []*wireSend, recvs []*wireRecv, err error) error {
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
	if jerr := x.Host.JobErr(); jerr != nil {
		err = jerr
	}
	return fmt.Errorf("gpu net part over net (%s) unfinished toward ranks %v and from ranks %v: %w", x.nicName(), to, from, err)
}

// startSend seals the part toward sd's peer (the last slot's event, the
// D2H stream joined into s) and posts its staging table (with call, this
// rank's call number, for the tests' logs).
func (x *Share) startSend(s *gpu.Stream, sd *wireSend, call uint64) error {
	nt := sd.t
	pt := &nt.part
	pt.Sealed = true
	if pt.Used {
		if err := nt.Stream.Record(nt.Slots[pt.Slot]); err != nil {
			return err
		}
		if err := nt.Stream.Record(nt.End); err != nil {
			return err
		}
		if err := s.Wait(nt.End); err != nil {
			return err
		}
		pt.Used = false
	}
	sb := pt.Plan.SlotBytes
	sd.slots = (pt.Staged + sb - 1) / sb
	if f := x.OnSplit; f != nil {
		f(pcieshare.SplitRec{From: x.Me, To: sd.j, Call: call, SlotBytes: sb, Segs: append([]pcie.Seg(nil), pt.Segs...),
			Bytes: pt.Bytes, Pushed: sd.pushed})
	}
	if f := x.Fault; f != nil {
		if err := f("send", sd.j); err != nil {
			return err
		}
	}
	sd.hdr = pcie.AppendTable(nil, call, sb, pt.Segs)
	req, err := nt.conn.ISend(sd.hdr, tagTable, nil)
	if err != nil {
		return err
	}
	sd.reqs = append(sd.reqs, req)
	return nil
}

// stepSend posts every slot whose D2H has finished and collects finished
// sends; it reports progress.
func (x *Share) stepSend(sd *wireSend) (progress bool, err error) {
	nt := sd.t
	for sd.next < sd.slots {
		fin, err := nt.Slots[sd.next].Done()
		if err != nil {
			return false, err
		}
		if !fin {
			break
		}
		if f := x.Fault; f != nil {
			if err := f("slot", sd.j); err != nil {
				return false, err
			}
		}
		sb := nt.part.Plan.SlotBytes
		lo := sd.next * sb
		req, err := nt.conn.ISend(nt.Mem.Bytes()[lo:min(lo+sb, nt.part.Staged)], TagSlot|uint64(sd.next), nil)
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
func (x *Share) stepRecv(s *gpu.Stream, recv *gpu.Buffer, rc *wireRecv) (progress bool, err error) {
	r := rc.r
	if !rc.posted {
		if r.busy { // the last call's H2D copies out of the staging
			fin, err := r.End.Done()
			if err != nil || !fin {
				return false, err
			}
			r.busy = false
		}
		rc.hdr = make([]byte, pcie.TableBytes)
		rc.hreq, err = r.conn.IRecv([][]byte{rc.hdr}, []uint64{tagTable}, nil)
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
			req, err := r.conn.IRecv([][]byte{mem[lo:min(lo+rc.sb, total)]}, []uint64{TagSlot | uint64(lo/rc.sb)}, nil)
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
func (rc *wireRecv) total() int {
	n := 0
	for _, sg := range rc.segs {
		n += sg.N
	}
	return n
}

// unstage enqueues the H2D copies of slot rc.next into recv.
func (x *Share) unstage(rc *wireRecv, recv *gpu.Buffer) error {
	if f := x.Fault; f != nil {
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
func (x *Share) endRecv(s *gpu.Stream, rc *wireRecv) error {
	r := rc.r
	rc.done = true
	if f := x.OnSplit; f != nil {
		f(pcieshare.SplitRec{From: rc.j, To: x.Me, Call: binary.LittleEndian.Uint64(rc.hdr), Receiver: true, SlotBytes: rc.sb, Segs: rc.segs})
	}
	if rc.pr.Timing() {
		if r.end == nil {
			r.end, _ = x.Dev.NewEvent(true) // no event: the part goes untimed and the sender drops the sample
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

// parseTable reads and checks the staging table of n bytes in rc.hdr
// (pcie.ParseTable: every piece inside recv and the staging, in at most
// pcie.Slots slots; and nothing after its entries). A table that does not
// fit is a protocol error, never a partial copy.
func (x *Share) parseTable(rc *wireRecv, n int, recv *gpu.Buffer) error {
	m := rc.hdr[:n]
	recvLen := 0
	if recv != nil {
		recvLen = recv.Len()
	}
	sb, segs, err := pcie.ParseTable(m, recvLen, rc.r.Mem.Len())
	if err == nil && n != pcie.TableHeader+16*len(segs) {
		err = fmt.Errorf("has %d entries in %d bytes", len(segs), n)
	}
	if err != nil {
		return fmt.Errorf("rank %d sent a net staging table that %w: %w", rc.j, err, errs.ErrMismatch)
	}
	rc.sb, rc.segs = sb, segs
	return nil
}
