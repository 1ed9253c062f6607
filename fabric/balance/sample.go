package balance

import "time"

// Measuring a split transfer for Observe, without adding a single
// synchronization to it: a Sample is the state of timing one transfer of
// a pair whose parts end where different clocks see them.
//
// The caller times one transfer per pair at a time: it arms a Sample when
// the transfer is worth timing, closes it when the transfer's bytes per
// link are known, and reads its timers (GPU events, say) in a later call,
// never waiting for them. The local part (timed by the sender) is ready
// when its timers are; the remote part (timed by the receiver, which
// reports it back under the Sample's sequence number) when the report
// comes. A Sample that nothing settles for SampleMaxAge calls is dropped,
// so a host that runs far ahead of its timers measures fewer transfers,
// never more, and a lost report costs one sample, not the pair's
// measurements.
//
// Sample is pure: the clock readings come in as durations.

// SampleMaxAge is how many calls a closed Sample waits for its timers or
// its report before it is dropped.
const SampleMaxAge = 64

type sampleState uint8

const (
	sampleIdle    sampleState = iota
	sampleArmed               // timing this call
	samplePending             // the call is over; waiting for the timers or the report
)

// Sample is one transfer being timed.
type Sample struct {
	state  sampleState
	seq    uint64 // numbers the samples of this pair; 0: none yet
	remote bool   // the remote part is timed by the receiver
	age    int
	bytes  int // the whole transfer
	local  int // bytes of the local part
	far    int // bytes of the remote part
}

// Idle reports whether no sample is out: one may be armed.
func (s *Sample) Idle() bool { return s.state == sampleIdle }

// Armed reports whether the current call is being timed.
func (s *Sample) Armed() bool { return s.state == sampleArmed }

// Arm starts timing this call's transfer of bytes; remote says whether a
// part of it is timed by the receiver. It returns the sample's sequence
// number (for the receiver's report).
func (s *Sample) Arm(bytes int, remote bool) uint64 {
	s.seq++
	s.state, s.remote, s.age, s.bytes = sampleArmed, remote, 0, bytes
	return s.seq
}

// Seq is the sequence number of the sample armed last.
func (s *Sample) Seq() uint64 { return s.seq }

// Remote reports whether the armed sample waits for a remote report.
func (s *Sample) Remote() bool { return s.remote }

// Close ends the armed sample's call: local and far bytes went over the
// local and the remote part.
func (s *Sample) Close(local, far int) {
	if s.state == sampleArmed {
		s.state, s.local, s.far = samplePending, local, far
	}
}

// Settle runs at the start of a call. A sample still armed belongs to a
// call that failed before its end and is dropped; a pending one ages, and
// is dropped past SampleMaxAge. It reports whether the caller should now
// read the local timers of a pending sample that waits for no report (and
// call Done once they are read).
func (s *Sample) Settle() (readLocal bool) {
	switch s.state {
	case sampleArmed:
		s.state = sampleIdle
		return false
	case sampleIdle:
		return false
	}
	s.age++
	if s.age > SampleMaxAge {
		s.state = sampleIdle
		return false
	}
	return !s.remote
}

// Reported takes the receiver's report for sample seq: it reports whether
// that is the pending sample that waits for it, which is then settled
// (the caller reads its local timers and calls Observations).
func (s *Sample) Reported(seq uint64) bool {
	if seq == 0 || s.state != samplePending || !s.remote || seq != s.seq {
		return false
	}
	s.state = sampleIdle
	return true
}

// Done settles the pending sample once its local timers have been read.
func (s *Sample) Done() { s.state = sampleIdle }

// Bytes is the whole transfer's size, for Planner.Observe.
func (s *Sample) Bytes() int { return s.bytes }

// Observations are the sample's measurements for Planner.Observe: the
// local part over link localLink took localDur (when timed, ok), the
// remote part over farLink took farDur (0: untimed).
func (s *Sample) Observations(localLink, farLink int, localDur time.Duration, ok bool, farDur time.Duration) []Observation {
	var obs []Observation
	if ok {
		obs = append(obs, Observation{Link: localLink, Bytes: int64(s.local), Duration: localDur})
	}
	if s.far > 0 && farDur > 0 {
		obs = append(obs, Observation{Link: farLink, Bytes: int64(s.far), Duration: farDur})
	}
	return obs
}

// LatestEnd is the end of a part carried by several timers started
// together: the latest of their durations. ok is false when none ran.
func LatestEnd(durations []time.Duration) (d time.Duration, ok bool) {
	for _, x := range durations {
		d, ok = max(d, x), true
	}
	return d, ok && d > 0
}
