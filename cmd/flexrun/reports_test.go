package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReports: ranks that report how a communicator ended as flexlink's
// libnccl does (testdata/reporter: join flexrun's store as a reporter,
// put, say goodbye) are judged on what each last said, and a reporter
// that dies in the middle of its report loses only its own.
//
//   - One process reports more than once: a stall (a call waiting for
//     rank 1, which then catches up), then a later, more specific cause
//     (a mismatch, or a later call it timed out in waiting for rank 2).
//     Its second report is heard (a reporter may join again), and the
//     stall, for a call that completed, is not the verdict.
//   - A reporter child of rank 2 joins the job's store as rank 2 and is
//     killed (SIGKILL) while a put of 48 MiB is half sent; then ranks 0
//     and 1 time out waiting for rank 2 and report it: their reports
//     still count (the dead reporter's loss did not fail the store), and
//     the verdict names rank 2.
func TestReports(t *testing.T) {
	const host = `\(host \S+, pid \d+\)`
	tests := []struct {
		name, plan    string
		code          int
		first, second string // flexrun's lines, regexps
		log           string // in flexrun's DEBUG log, a regexp ("": nothing asked)
	}{
		{name: "stall, then a mismatch",
			plan: "0=stall:5:1,touch:stalled,mismatch:9:2,exit:1;1=hang;2=hang", code: 1,
			first:  `^collective mismatch on communicator nccl@test/w: rank 0 called allreduce count=1 int64 \(call #9\), rank 2 called allgather count=1 int64 \(call #9\)(; terminating \d+ other ranks?)?$`,
			second: `^rank 0 stopped: collective mismatch$`},
		{name: "stall, then a later timeout",
			plan: "0=stall:5:1,timeout:9:2,exit:1;1=hang;2=hang", code: 1,
			first:  `^rank 2 ` + host + ` did not take part in AllReduce #9 on communicator nccl@test/w: rank 0 timed out waiting for it(; terminating \d+ other ranks?)?$`,
			second: `^rank 0 stopped: timed out waiting for rank 2$`},
		{name: "stall that resumed, then an exit",
			plan: "0=stall:5:1,resumed:5,exit:3;1=hang;2=hang", code: 3,
			first: `^rank 0 ` + host + ` exited with status 3(; terminating \d+ other ranks?)?$`},
		{name: "a reporter killed mid-report",
			plan: "2=killed-mid-report,touch:killed,hang;0=wait:killed,timeout:5:2,exit:1;1=wait:killed,timeout:5:2,exit:1", code: 1,
			first:  `^rank 2 ` + host + ` did not take part in AllReduce #5 on communicator nccl@test/w: (ranks 0, 1|rank 0|rank 1) timed out waiting for it(; terminating \d+ other ranks?)?$`,
			second: `^ranks 0, 1 stopped: timed out waiting for rank 2$`,
			log:    `transient member lost: rank=2 .*error="put frame: `}, // its connection ended in a put's frame
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := flexrun(t, runOpts{env: []string{"FLEXLINK_DEBUG=debug"}}, "-np", "3", "--oversubscribe", "--kill-grace", "1s",
				bins.report, "-dir", t.TempDir(), "-plan", tc.plan)
			var lines []string
			for _, l := range strings.Split(r.stderr, "\n") {
				if s, ok := strings.CutPrefix(l, "flexrun: "); ok {
					lines = append(lines, s)
				}
			}
			t.Logf("exit %d after %v: %q", r.code, r.elapsed.Round(time.Millisecond), lines)
			if r.code != tc.code {
				t.Errorf("exit status %d, want %d", r.code, tc.code)
			}
			if len(lines) == 0 || !regexp.MustCompile(tc.first).MatchString(lines[0]) {
				t.Errorf("flexrun's first line does not match %q", tc.first)
			}
			switch {
			case tc.second == "" && len(lines) > 1:
				t.Errorf("flexrun's second line %q, want none", lines[1])
			case tc.second != "" && (len(lines) < 2 || !regexp.MustCompile(tc.second).MatchString(lines[1])):
				t.Errorf("flexrun's second line does not match %q", tc.second)
			}
			if tc.log != "" && !regexp.MustCompile(tc.log).MatchString(r.stderr) {
				t.Errorf("flexrun's log has no line matching %q", tc.log)
			}
			if limit := 10 * time.Second; r.elapsed > limit {
				t.Errorf("the job took %v, want at most %v", r.elapsed, limit)
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", r.stderr)
			}
		})
	}
}
