package capi

import (
	"fmt"
	"testing"
	"time"
)

// TestEnqWatch drives watchStalls' state machine for enqueued calls
// (enqWatch.due and answer) through ticks at given times, with
// FLEXLINK_STALL_REPORT=5s and 1 s ticks: when it asks the members, and
// what it does with their answer (report, withdraw, what every member has
// made). At each tick the harness plays watchEnqueued: it keeps caught
// from the steps, and answers a question only when one is due.
func TestEnqWatch(t *testing.T) {
	const after, tick = 5 * time.Second, time.Second
	name := func(n uint64) string { return fmt.Sprintf("AllReduce #%d", n) }
	type at struct {
		s      float64 // seconds from the start
		latest uint64  // this rank's latest call
		out    uint64  // its last call enqueued
		busy   bool    // a call in flight on the caller's thread
		due    bool    // a question is due
		first  uint64  // the answer: the first call a member has not made (0: none)
		all    bool    // the answer: every member answered
		want   enqStep // what to do with it
	}
	// idle is a tick at s with calls 1..3 enqueued and no question due.
	idle := func(s float64) at { return at{s: s, latest: 3, out: 3} }
	ask := func(s float64, first uint64, all bool, want enqStep) at {
		return at{s: s, latest: 3, out: 3, due: true, first: first, all: all, want: want}
	}
	for _, tc := range []struct {
		name  string
		ticks []at
	}{
		{"nobody behind: one question, then none", []at{
			idle(0), idle(4.9),
			ask(5, 0, true, enqStep{caught: 3}),
			idle(6), idle(30),
		}},
		{"withheld: reported at once, withdrawn once made", []at{
			idle(0), idle(4),
			ask(5, 3, true, enqStep{report: "AllReduce #3", caught: 2}),
			idle(5.5),
			ask(6, 3, true, enqStep{caught: 2}),
			idle(7),
			ask(8, 0, true, enqStep{withdraw: "AllReduce #3", caught: 3}),
			idle(9), idle(20),
		}},
		{"a call in flight on the caller's thread: no question", []at{
			{s: 0, latest: 3, out: 3, busy: true}, {s: 5, latest: 3, out: 3, busy: true}, {s: 20, latest: 3, out: 3, busy: true},
		}},
		{"calls go on: no question", []at{
			{s: 0, latest: 3, out: 3}, {s: 4, latest: 4, out: 4}, {s: 8, latest: 5, out: 5}, {s: 12, latest: 6, out: 6},
		}},
		{"a member does not answer: the report stands, asked again after the setting", []at{
			idle(0),
			ask(5, 3, true, enqStep{report: "AllReduce #3", caught: 2}),
			ask(6, 0, false, enqStep{}),
			idle(7), idle(10.9),
			ask(11, 3, true, enqStep{caught: 2}),
		}},
		{"behind again: withdrawn, then reported once held for the setting", []at{
			idle(0),
			{s: 5, latest: 4, out: 4, due: false}, // this rank's fourth call: the count changed
			{s: 10, latest: 4, out: 4, due: true, first: 3, all: true, want: enqStep{report: "AllReduce #3", caught: 2}},
			{s: 11, latest: 4, out: 4, due: true, first: 4, all: true, want: enqStep{withdraw: "AllReduce #3", caught: 3}},
			{s: 12, latest: 4, out: 4, due: true, first: 4, all: true, want: enqStep{caught: 3}},
			{s: 15, latest: 4, out: 4, due: true, first: 4, all: true, want: enqStep{caught: 3}},
			{s: 16, latest: 4, out: 4, due: true, first: 4, all: true, want: enqStep{report: "AllReduce #4", caught: 3}},
			{s: 17, latest: 4, out: 4, due: true, first: 0, all: true, want: enqStep{withdraw: "AllReduce #4", caught: 4}},
		}},
		{"peers trail as work resumes: withdrawn, not reported again", []at{
			idle(0),
			ask(5, 3, true, enqStep{report: "AllReduce #3", caught: 2}),
			{s: 6, latest: 5, out: 5, due: true, first: 4, all: true, want: enqStep{withdraw: "AllReduce #3", caught: 3}},
			{s: 7, latest: 6, out: 6}, {s: 8, latest: 7, out: 7}, {s: 9, latest: 8, out: 8}, {s: 12, latest: 9, out: 9},
		}},
		{"a standing report is asked again less often, at least every setting", []at{
			idle(0),
			ask(5, 3, true, enqStep{report: "AllReduce #3", caught: 2}),
			ask(6, 3, true, enqStep{caught: 2}), idle(7),
			ask(8, 3, true, enqStep{caught: 2}), idle(9), idle(11),
			ask(12, 3, true, enqStep{caught: 2}), idle(13), idle(16),
			ask(17, 3, true, enqStep{caught: 2}), idle(21),
			ask(22, 3, true, enqStep{caught: 2}),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e enqWatch
			var caught uint64
			t0 := time.Unix(1000, 0)
			for _, k := range tc.ticks {
				now := t0.Add(time.Duration(k.s * float64(time.Second)))
				if got := e.due(now, k.latest, k.out, caught, k.busy, after); got != k.due {
					t.Fatalf("at %vs: due %v, want %v", k.s, got, k.due)
				}
				if !k.due {
					continue
				}
				st := e.answer(now, k.out, k.first, k.all, tick, after, name)
				if st != k.want {
					t.Fatalf("at %vs: answer (first %d, all %v) gives %+v, want %+v", k.s, k.first, k.all, st, k.want)
				}
				caught = max(caught, st.caught)
			}
		})
	}
}
