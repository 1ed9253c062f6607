package netshare

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// One call's net part, in the order the plane runs it (share.go says
// what it is):
//
//	Begin          after the PCIe share's Begin: the net parts of the call's split
//	ReadyWords,    the net words of the ready messages: announcement and
//	Ready          the report on the peer's last timed net part
//	Start          the event after which H2D copies may write recv
//	Stage          during the work: D2H into the staging
//	Send           after the work: the wire and the H2D copies (wire.go)

// Words is the length of the net words of a ready message: whether this rank sends
// the peer a net part in this call, and its report on the peer's last
// timed net part (nanoseconds from the pair's t0; the sequence number is
// the PCIe words').
const Words = 2 * 8

// Begin takes the net parts of the call's split toward every peer, and
// logs each share at INFO once per size class and again
// when it moves by half a percent (as the PCIe share's log).
func (x *Share) Begin(peers []int, _ uint64, p linkshare.Plan) {
	if x == nil {
		return
	}
	x.plan = p
	b := p.Bytes()
	for _, j := range peers {
		nt, t := x.tx[j], x.PCIe.Tx(j)
		if nt == nil {
			continue
		}
		pl := p.Part(j)
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
		x.Host.Log().Info("gpu net share", "peer", j, "push_bytes", b, "net", round3(share), "nic", x.nicName(),
			"by", x.by(), "observed", t.Observed)
	}
}

// Stage copies src D2H into the net staging toward peer j, slot by slot,
// recording a slot's event when the copies move past it, and notes where
// the bytes go (off in the peer's recv).
func (x *Share) Stage(j, off int, src *gpu.Buffer, after *gpu.Event) error {
	nt := x.tx[j]
	if err := nt.part.CanStage(x.Me, j, "net", x.Fault); err != nil {
		return err
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
	x.count(src.Len())
	return nil
}

// The net part's wire does its work in Send (wire.go): it seals
// its parts there, and its receives end there too; its tables travel on
// its own connections, not in the done messages.
func (x *Share) Probe() error                                            { return nil }
func (x *Share) Complete(*gpu.Stream) error                              { return nil }
func (x *Share) Receive(*gpu.Stream, *gpu.Buffer, [][]byte, []int) error { return nil }
func (x *Share) DoneLen(int) int                                         { return 0 }
func (x *Share) DoneMessage(_ int, _ uint64, b []byte) []byte            { return b }

// Words is the length of the net words of a ready message.
func (x *Share) Words() int { return Words }

// ReadyWords writes the net words of this rank's ready message to peer j:
// the announcement of a net part and this rank's report on j's last timed
// net part (from the pair's probe: the PCIe share's ReadyWords, which runs
// first, keeps it).
func (x *Share) ReadyWords(j int, w []byte) {
	if x == nil {
		return
	}
	if nt := x.tx[j]; nt != nil && nt.Planned() {
		binary.LittleEndian.PutUint64(w[0:], 1)
	}
	binary.LittleEndian.PutUint64(w[8:], x.PCIe.RiderReport(j))
}

// Ready reads the net words of peer j's ready message w: whether a net
// part comes from it and its report on this rank's last timed net part,
// before the PCIe words are read.
func (x *Share) Ready(j int, w []byte) error {
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

// Start records, on s (which now waits on every peer's ready event), the
// event after which the H2D copies of this call's net parts may write into
// this rank's recv buffer, when some peer announced one.
func (x *Share) Start(s *gpu.Stream, peers []int) error {
	if x == nil {
		return nil
	}
	for _, j := range peers {
		if r := x.rx[j]; r != nil && r.expect {
			if x.start == nil {
				var err error
				if x.start, err = x.Dev.NewEvent(false); err != nil {
					return err
				}
			}
			return s.Record(x.start)
		}
	}
	return nil
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
