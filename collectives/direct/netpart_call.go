package direct

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// One call's net part, in the order do() runs it (netpart.go says what it
// is; the pcie*.go steps call the first ones):
//
//	begin          with the PCIe part's begin: the net part of the call's
//	               split (split.go)
//	readyWords,    the net words of the ready messages: announcement and
//	ready          the report on the peer's last timed net part
//	stage          during the work (pushSplitWith): D2H into the staging
//	run            after the work: the wire and the H2D copies (netpart_wire.go)

// The net words of a ready message (direct.go): whether this rank sends
// the peer a net part in this call, and its report on the peer's last
// timed net part (nanoseconds from the pair's t0; the sequence number is
// the PCIe words').
const netWords = 2 * 8

// begin starts a call of b bytes toward t's peer with the net part pl
// (planCall's; zero: none), and logs the share at INFO once per size
// class and again when it moves by half a percent (as the PCIe share's
// log).
func (x *netState) begin(t *pcieTx, b int, pl pcie.Plan) {
	if x == nil || t.net == nil {
		return
	}
	nt := t.net
	nt.txCall = txCall{bytes: b, slot: -1, segs: nt.segs[:0], plan: pl.Bytes, capBytes: pl.Cap, slotBytes: pl.SlotBytes}
	if b == 0 || nt.plan == 0 && b < t.planner.Threshold() {
		return
	}
	class, share := bits.Len(uint(b)), float64(nt.plan)/float64(b)
	if old, ok := nt.logged[class]; ok && math.Abs(old-share) < 0.005 {
		return
	}
	nt.logged[class] = share
	x.c.Log().Info("gpu net share", "peer", t.peer, "push_bytes", b, "net", round3(share), "nic", x.nic(),
		"by", x.by(), "observed", t.observed)
}

// planned reports whether t's call has a net part.
func (x *netState) planned(t *pcieTx) bool { return x != nil && t.net != nil && t.net.plan > 0 }

// stagedBytes is what t's call has staged for the net part so far.
func (x *netState) stagedBytes(t *pcieTx) int {
	if x == nil || t.net == nil {
		return 0
	}
	return t.net.staged
}

// stage copies src D2H into the net staging toward t's peer, slot by slot,
// recording a slot's event when the copies move past it, and notes where
// the bytes go (off in the peer's recv).
func (x *netState) stage(t *pcieTx, off int, src *gpu.Buffer, after *gpu.Event) error {
	nt := t.net
	if nt.sealed {
		return fmt.Errorf("rank %d: net part toward rank %d staged after the call's copies were joined (a bug)", x.me, t.peer)
	}
	if f := x.fault; f != nil {
		if err := f("d2h", t.peer); err != nil {
			return fmt.Errorf("net part toward rank %d: %w", t.peer, err)
		}
	}
	if after != nil {
		if err := nt.Stream.Wait(after); err != nil {
			return err
		}
	}
	mem := nt.Mem.Bytes()
	for pos := 0; pos < src.Len(); {
		k := nt.staged / nt.slotBytes
		if k != nt.slot {
			if nt.slot >= 0 {
				if err := nt.Stream.Record(nt.Slots[nt.slot]); err != nil {
					return err
				}
			}
			nt.slot = k
		}
		m := min(src.Len()-pos, (k+1)*nt.slotBytes-nt.staged)
		if err := nt.Stream.CopyDtoH(mem[nt.staged:nt.staged+m], src.Sub(pos, m)); err != nil {
			return fmt.Errorf("net part toward rank %d: %w", t.peer, err)
		}
		pos += m
		nt.staged += m
	}
	nt.segs = appendSeg(nt.segs, off, src.Len())
	nt.used = true
	x.stats.add(linkNet, src.Len())
	return nil
}

// readyWords writes the net words of this rank's ready message to peer j:
// the announcement of a net part and ns, this rank's report on j's last
// timed net part (from the pair's probe, pcie_probe.go).
func (x *netState) readyWords(t *pcieTx, w []byte, ns uint64) {
	if x == nil {
		return
	}
	if t != nil && x.planned(t) {
		binary.LittleEndian.PutUint64(w[0:], 1)
	}
	binary.LittleEndian.PutUint64(w[8:], ns)
}

// ready reads the net words of peer j's ready message w: whether a net
// part comes from it (into r) and its report on this rank's last timed net
// part (into t), before the PCIe words are read.
func (x *netState) ready(j int, t *pcieTx, r *pcieRx, w []byte) error {
	le := binary.LittleEndian
	announced := le.Uint64(w) == 1
	if x == nil || r == nil || r.net == nil {
		if announced {
			return fmt.Errorf("rank %d announces a net part, but this rank has no net connection from it (FLEXLINK_LINKS differs?): %w",
				j, errs.ErrMismatch)
		}
		return nil
	}
	r.net.expect = announced
	if t != nil && t.net != nil {
		t.net.report = le.Uint64(w[8:])
	}
	return nil
}

// expects reports whether r's peer sends a net part in this call.
func (x *netState) expects(r *pcieRx) bool { return x != nil && r.net != nil && r.net.expect }

// report is the peer's report on t's last timed net part (ns, 0: none).
func (x *netState) report(t *pcieTx) uint64 {
	if x == nil || t.net == nil {
		return 0
	}
	return t.net.report
}

// startOn records, on s (which now waits on every peer's ready event), the
// event after which the H2D copies of this call's net parts may write into
// this rank's recv buffer, when some peer announced one.
func (x *netState) startOn(s *gpu.Stream, rx []*pcieRx, peers []int) error {
	if x == nil || rx == nil {
		return nil
	}
	for _, j := range peers {
		if r := rx[j]; r != nil && x.expects(r) {
			if x.start == nil {
				var err error
				if x.start, err = x.peers.dev.NewEvent(false); err != nil {
					return err
				}
			}
			return s.Record(x.start)
		}
	}
	return nil
}

// timedEnd is the end event of r's net part in the pending probe (nil:
// none was timed).
func (rn *netRx) timedEnd() *gpu.Event {
	if rn == nil || !rn.timed {
		return nil
	}
	return rn.end
}

// untime ends the pending probe's net timing.
func (rn *netRx) untime() {
	if rn != nil {
		rn.timed = false
	}
}
