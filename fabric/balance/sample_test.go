package balance

import (
	"reflect"
	"testing"
	"time"
)

// TestSample walks a Sample through its lives: a local-only sample read
// at the next call, a remote one settled by its report (and not by a
// stale or foreign one), a call that failed while armed, and one whose
// report never comes.
func TestSample(t *testing.T) {
	const nvl, pcie = 0, 1
	ms := time.Millisecond
	t.Run("local", func(t *testing.T) {
		var s Sample
		if !s.Idle() || s.Settle() {
			t.Fatal("a new sample is not idle")
		}
		s.Arm(100, false)
		s.Close(100, 0)
		if !s.Settle() {
			t.Fatal("a closed local sample is not read at the next call")
		}
		got := s.Observations(nvl, pcie, ms, true, 0)
		if want := []Observation{{Link: nvl, Bytes: 100, Duration: ms}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("observations %v, want %v", got, want)
		}
		s.Done()
		if !s.Idle() || s.Bytes() != 100 {
			t.Fatal("Done leaves the sample busy")
		}
	})
	t.Run("remote", func(t *testing.T) {
		var s Sample
		seq := s.Arm(100, true)
		if !s.Armed() || !s.Remote() || s.Seq() != seq {
			t.Fatal("armed sample's state")
		}
		s.Close(70, 30)
		if s.Settle() {
			t.Fatal("a remote sample is read before its report")
		}
		for _, bad := range []uint64{0, seq + 1} {
			if s.Reported(bad) {
				t.Fatalf("report %d taken for sample %d", bad, seq)
			}
		}
		if !s.Reported(seq) || s.Reported(seq) {
			t.Fatal("the report is not taken exactly once")
		}
		got := s.Observations(nvl, pcie, 2*ms, true, 3*ms)
		want := []Observation{{Link: nvl, Bytes: 70, Duration: 2 * ms}, {Link: pcie, Bytes: 30, Duration: 3 * ms}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("observations %v, want %v", got, want)
		}
		if got := s.Observations(nvl, pcie, 0, false, 0); got != nil {
			t.Fatalf("untimed parts give %v", got)
		}
	})
	t.Run("failed call", func(t *testing.T) {
		var s Sample
		s.Arm(100, true)
		if s.Settle() || !s.Idle() {
			t.Fatal("a sample armed by a call that failed is not dropped")
		}
	})
	t.Run("report lost", func(t *testing.T) {
		var s Sample
		seq := s.Arm(100, true)
		s.Close(70, 30)
		for range SampleMaxAge {
			s.Settle()
		}
		if s.Idle() {
			t.Fatal("dropped before SampleMaxAge calls")
		}
		s.Settle()
		if !s.Idle() || s.Reported(seq) {
			t.Fatal("not dropped after SampleMaxAge calls")
		}
		if s.Arm(100, true) != seq+1 {
			t.Fatal("sequence numbers do not move on")
		}
	})
}

func TestLatestEnd(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
		ok   bool
	}{
		{nil, 0, false},
		{[]time.Duration{0}, 0, false},
		{[]time.Duration{ms, 3 * ms, 2 * ms}, 3 * ms, true},
	} {
		if d, ok := LatestEnd(tc.in); d != tc.want || ok != tc.ok {
			t.Errorf("LatestEnd(%v) = %v, %v; want %v, %v", tc.in, d, ok, tc.want, tc.ok)
		}
	}
}
