package pcieshare

import (
	"cmp"
	"math"
	"math/bits"
	"time"

	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/gpu"
)

// Stage 2 of the balancer for the PCIe share: timing the parts of a push
// and feeding them to the pair's planner (Planner.Observe), without adding
// a single synchronization to a call.
//
// The planner wants, per link, the time from the parts' common start to
// the part's completion. The common start is the moment a call's work may
// begin: the caller's stream has passed every peer's ready event. Both
// ranks of a pair reach it together on the GPU (each waits on the other's
// ready event and on its own earlier work, whichever is later), so each
// records a timing event on its own stream right there, t0:
//
//   - NVLink part: the sender records a timing event on each copy lane it
//     used toward the peer when the work joins the lanes; the part ends at
//     the latest of them.
//   - PCIe part: it ends when the receiver's last H2D copy ends, which
//     only the receiver can time: it records an event after its copies and
//     reports end − t0 (its own t0) in its next ready message to the
//     sender. That includes the D2H copies, the pipeline across slots and
//     the contention of both directions, which is what the planner must
//     learn (34 GB/s both ways against 50 one way).
//
// Events are read with Event.Done (cuEventQuery, non-blocking) in a later
// call, never waited for. One push per pair is timed at a time: a probe is
// armed only when the previous one has been fed back (or dropped), so the
// events are never re-recorded while a result is outstanding. A host that
// runs far ahead of its GPU therefore times fewer calls, never more. The
// receiver reports (sequence number, nanoseconds); 0 nanoseconds means it
// could not time the part and the sender drops the probe; a sender that
// hears nothing for balance.SampleMaxAge calls drops it too. That state
// machine and the observations it yields are fabric/balance's Sample;
// this file adds the GPU events that time it.
//
// Error: the two t0s differ by however far apart the two hosts enqueued
// them when a GPU was idle (microseconds), against parts of milliseconds.
//
// Pushes smaller than the planner's threshold are not timed (nothing
// changes below it); pushes above it with a PCIe share of 0 time NVLink
// alone, which lets the planner's estimate of PCIe decay back toward its
// profile so that PCIe is tried again.

type probeState uint8

// The receiver's probe states.
const (
	probeIdle    probeState = iota
	probeArmed              // timing this call
	probePending            // this call is over; waiting for events
)

// txProbe is the sender's timing of one push toward a peer: the sample
// (NVLink part local, PCIe part reported by the receiver) and its events.
type txProbe struct {
	s        balance.Sample
	t0       *gpu.Event
	lanes    []*gpu.Event // timing events, one per copy lane toward the peer
	used     []bool
	far, net int // bytes of the timed call's PCIe and net parts
}

// rxProbe is the receiver's timing of one PCIe part from a peer.
type rxProbe struct {
	state   probeState
	seq     uint64
	t0, end *gpu.Event
	pcie    bool // end follows a PCIe part (a net part alone may be timed)
}

// Timing reports whether the pair's probe times this call's parts from
// the peer (a rider times its part's end when it does).
func (r *Rx) Timing() bool { return r.probe.state == probeArmed }

// probeSettle, at the start of a call with t's peer, feeds back a pending
// NVLink-only probe whose events have completed, and ages out one whose
// report does not come.
func (x *Share) probeSettle(t *Tx) {
	pr := &t.probe
	if !pr.s.Settle() {
		return
	}
	d, ok, done := x.laneTime(t)
	if !done {
		return
	}
	x.observe(t, pr.s.Observations(LinkNVLink, LinkPCIe, d, ok, 0))
	pr.s.Done()
}

// probeArm starts timing this call's push to t's peer when it is worth it
// (at or above the planner's threshold, or split) and no probe is out.
func (x *Share) probeArm(t *Tx, rider bool) {
	pr := &t.probe
	split := t.part.Plan.Bytes > 0 || rider
	if !pr.s.Idle() || t.part.Bytes == 0 || !split && t.part.Bytes < t.Planner.Threshold() {
		return
	}
	if pr.t0 == nil {
		var err error
		if pr.t0, err = x.Dev.NewEvent(true); err != nil {
			x.Host.Log().Debug("gpu pcie: no timing events", "error", err)
			return
		}
		for range x.LaneCount {
			e, err := x.Dev.NewEvent(true)
			if err != nil {
				x.Host.Log().Debug("gpu pcie: no timing events", "error", err)
				break // lanes without an event are simply not timed
			}
			pr.lanes = append(pr.lanes, e)
		}
		pr.used = make([]bool, len(pr.lanes))
	}
	pr.s.Arm(t.part.Bytes, split)
	clear(pr.used)
}

// probeStart records t0 on s for every probe armed in this call, as
// sender or as receiver.
func (x *Share) probeStart(s *gpu.Stream, peers []int) error {
	for _, j := range peers {
		if t := x.Tx(j); t != nil && t.probe.s.Armed() {
			if err := s.Record(t.probe.t0); err != nil {
				return err
			}
		}
		r := x.Rx(j)
		if r == nil || r.probe.state != probeArmed {
			continue
		}
		if r.probe.t0 == nil {
			t0, err := x.Dev.NewEvent(true)
			if err == nil {
				r.probe.end, err = x.Dev.NewEvent(true)
			}
			if err != nil {
				if t0 != nil {
					t0.Close()
				}
				r.probe.state = probeIdle // the sender ages its probe out
				continue
			}
			r.probe.t0 = t0
		}
		if err := s.Record(r.probe.t0); err != nil {
			return err
		}
	}
	return nil
}

// Probe, as the work joins the copy lanes, records a timing event on
// every lane used toward a peer whose push is timed.
func (x *Share) Probe() error {
	for _, t := range x.tx {
		if t == nil || !t.probe.s.Armed() {
			continue
		}
		l := x.Lanes(t.Peer)
		for k := 0; k < l.Len(); k++ {
			if !l.Used(k) || k >= len(t.probe.lanes) {
				continue
			}
			if err := l.Stream(k).Record(t.probe.lanes[k]); err != nil {
				return err
			}
			t.probe.used[k] = true
		}
	}
	return nil
}

// probeDone closes this call's armed sender probes: the bytes are known.
func (x *Share) probeDone() {
	for _, t := range x.tx {
		if t != nil && t.probe.s.Armed() {
			nb := 0
			if t.Rider != nil {
				nb = t.Rider.Staged()
			}
			t.probe.far, t.probe.net = t.part.Staged, nb
			t.probe.s.Close(x.plan.Pushed(t.Peer)-t.part.Staged-nb, t.part.Staged)
		}
	}
}

// probeReceived marks the end of a timed PCIe part on the receiver, after
// its H2D copies are enqueued.
func (x *Share) probeReceived(r *Rx) error {
	if r.probe.state != probeArmed {
		return nil
	}
	r.probe.state, r.probe.pcie = probePending, true
	return r.Stream.Record(r.probe.end)
}

// probeReport is the receiver's report for its next ready message: the
// pending probe's sequence number and the durations of its PCIe and net
// parts once their events have completed, (seq, 0, 0) when it cannot be
// timed, (0, 0, 0) when nothing is due. A part the call did not have
// reports 0.
func (x *Share) probeReport(r *Rx) (seq, ns, netNs uint64) {
	pr := &r.probe
	if pr.state != probePending {
		return 0, 0, 0
	}
	var ends [2]*gpu.Event // PCIe, net
	if pr.pcie {
		ends[0] = pr.end
	}
	if r.Rider != nil {
		ends[1] = r.Rider.TimedEnd()
	}
	var failed error
	for _, e := range ends {
		if e == nil {
			continue
		}
		done, err := e.Done()
		if err == nil && !done {
			return 0, 0, 0
		}
		failed = cmp.Or(failed, err)
	}
	pr.state, pr.pcie = probeIdle, false
	if r.Rider != nil {
		r.Rider.Untime()
	}
	if failed != nil {
		return pr.seq, 0, 0
	}
	since := func(e *gpu.Event) uint64 {
		if e == nil {
			return 0
		}
		d, err := e.Since(pr.t0)
		if err != nil || d <= 0 {
			return 0
		}
		return uint64(d.Nanoseconds())
	}
	return pr.seq, since(ends[0]), since(ends[1])
}

// probeReported takes the receiver's report on t's pending probe: with the
// sender's own NVLink timing it is one observation for the planner, of
// the NVLink, PCIe and net parts together.
func (x *Share) probeReported(t *Tx, seq, ns, netNs uint64) {
	pr := &t.probe
	if !pr.s.Reported(seq) {
		return
	}
	d, ok, done := x.laneTime(t)
	if !done || ns == 0 && (pr.net == 0 || pr.far > 0) || pr.net > 0 && netNs == 0 {
		return // untimed, or (rarely) the lanes are still busy: drop it whole
	}
	obs := pr.s.Observations(LinkNVLink, LinkPCIe, d, ok, time.Duration(ns))
	if pr.net > 0 {
		obs = append(obs, balance.Observation{Link: LinkRider, Bytes: int64(pr.net), Duration: time.Duration(netNs)})
	}
	x.observe(t, obs)
}

// laneTime is the NVLink part's duration: from t0 to the last timed lane.
// done is false while an event is still pending; ok is false when no lane
// was timed.
func (x *Share) laneTime(t *Tx) (d time.Duration, ok, done bool) {
	pr := &t.probe
	var ends []time.Duration
	for k, used := range pr.used {
		if !used {
			continue
		}
		fin, err := pr.lanes[k].Done()
		if err != nil {
			return 0, false, true
		}
		if !fin {
			return 0, false, false
		}
		e, err := pr.lanes[k].Since(pr.t0)
		if err != nil {
			return 0, false, true
		}
		ends = append(ends, e)
	}
	d, ok = balance.LatestEnd(ends)
	return d, ok, true
}

func (x *Share) observe(t *Tx, obs []balance.Observation) {
	if len(obs) == 0 {
		return
	}
	if x.Emulate != nil {
		x.Emulate(t.Peer, obs)
	}
	t.Planner.Observe(t.probe.s.Bytes(), obs)
	t.Observed++
	x.Host.Log().Debug("gpu pcie observed", "peer", t.Peer, "bytes", t.probe.s.Bytes(), "parts", obs)
}

// logShare logs the split in force toward t's peer at INFO, once per size
// class and again whenever it moves by half a percent or more.
func (x *Share) logShare(t *Tx, by string) {
	class := bits.Len(uint(t.part.Bytes))
	share := float64(t.part.Plan.Bytes) / float64(t.part.Bytes)
	if old, ok := t.logged[class]; ok && math.Abs(old-share) < 0.005 {
		return
	}
	t.logged[class] = share
	x.Host.Log().Info("gpu pcie share", "peer", t.Peer, "push_bytes", t.part.Bytes,
		"nvlink", round3(1-share), "pcie", round3(share), "by", by, "observed", t.Observed)
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
