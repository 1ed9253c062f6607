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
// is):
//
//	begin          with the PCIe share's Begin: the net parts of the call's
//	               split (split.go)
//	readyWords,    the net words of the ready messages: announcement and
//	ready          the report on the peer's last timed net part
//	Stage          during the work (pushSplitWith): D2H into the staging
//	Send           after the work: the wire and the H2D copies (netpart_wire.go)

// The net words of a ready message (direct.go): whether this rank sends
// the peer a net part in this call, and its report on the peer's last
// timed net part (nanoseconds from the pair's t0; the sequence number is
// the PCIe words').
const netWords = 2 * 8

// begin takes the net parts of the call's split toward every peer (cp:
// planCall's), and logs each share at INFO once per size class and again
// when it moves by half a percent (as the PCIe share's log).
func (x *netState) begin(peers []int, cp *callPlan) {
	if x == nil {
		return
	}
	x.plan = cp
	b := cp.Bytes
	for _, j := range peers {
		nt, t := x.tx[j], x.px.Tx(j)
		if nt == nil {
			continue
		}
		pl := cp.To[j].Net
		if b == 0 {
			pl = pcie.Plan{}
		}
		nt.part.Reset(b, pl)
		if b == 0 || pl.Bytes == 0 && b < t.Planner.Threshold() {
			continue
		}
		class, share := bits.Len(uint(b)), float64(pl.Bytes)/float64(b)
		if old, ok := nt.logged[class]; ok && math.Abs(old-share) < 0.005 {
			continue
		}
		nt.logged[class] = share
		x.c.Log().Info("gpu net share", "peer", j, "push_bytes", b, "net", round3(share), "nic", x.nic(),
			"by", x.by(), "observed", t.Observed)
	}
}

// Stage copies src D2H into the net staging toward peer j, slot by slot,
// recording a slot's event when the copies move past it, and notes where
// the bytes go (off in the peer's recv).
func (x *netState) Stage(j, off int, src *gpu.Buffer, after *gpu.Event) error {
	nt := x.tx[j]
	if nt.part.Sealed {
		return fmt.Errorf("rank %d: net part toward rank %d staged after the call's copies were joined (a bug)", x.me, j)
	}
	if f := x.fault; f != nil {
		if err := f("d2h", j); err != nil {
			return fmt.Errorf("net part toward rank %d: %w", j, err)
		}
	}
	record := func() error {
		if nt.part.Slot < 0 {
			return nil
		}
		return nt.Stream.Record(nt.Slots[nt.part.Slot])
	}
	if err := nt.part.Fill(nt.Tx, off, src, after, record); err != nil {
		return fmt.Errorf("net part toward rank %d: %w", j, err)
	}
	x.stats.add(linkNet, src.Len())
	return nil
}

// The net part's wire does its work in Send (netpart_wire.go): it seals
// its parts there, and its receives end there too.
func (x *netState) Probe() error                                            { return nil }
func (x *netState) Complete(*gpu.Stream) error                              { return nil }
func (x *netState) Receive(*gpu.Stream, *gpu.Buffer, [][]byte, []int) error { return nil }

// readyWords writes the net words of this rank's ready message to peer j:
// the announcement of a net part and ns, this rank's report on j's last
// timed net part (from the pair's probe, fabric/pcieshare).
func (x *netState) readyWords(j int, w []byte, ns uint64) {
	if x == nil {
		return
	}
	if nt := x.tx[j]; nt != nil && nt.Planned() {
		binary.LittleEndian.PutUint64(w[0:], 1)
	}
	binary.LittleEndian.PutUint64(w[8:], ns)
}

// ready reads the net words of peer j's ready message w: whether a net
// part comes from it and its report on this rank's last timed net part,
// before the PCIe words are read.
func (x *netState) ready(j int, w []byte) error {
	le := binary.LittleEndian
	announced := le.Uint64(w) == 1
	if x == nil || x.rx[j] == nil {
		if announced {
			return fmt.Errorf("rank %d announces a net part, but this rank has no net connection from it (FLEXLINK_LINKS differs?): %w",
				j, errs.ErrMismatch)
		}
		return nil
	}
	x.rx[j].expect = announced
	if nt := x.tx[j]; nt != nil {
		nt.report = le.Uint64(w[8:])
	}
	return nil
}

// startOn records, on s (which now waits on every peer's ready event), the
// event after which the H2D copies of this call's net parts may write into
// this rank's recv buffer, when some peer announced one.
func (x *netState) startOn(s *gpu.Stream, peers []int) error {
	if x == nil {
		return nil
	}
	for _, j := range peers {
		if r := x.rx[j]; r != nil && r.expect {
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
