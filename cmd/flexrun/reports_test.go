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
//   - Issue 30's PyTorch case (4 ranks): rank 1 withholds AllReduce #3
//     past the others' stall reports (they name it behind, as libnccl's
//     stall watch does), then exits 0; they fail on its loss and exit 1.
//     The verdict names rank 1 first, with its status 0 and the call it
//     had not made, and no rank that waited for it as the cause; with or
//     without their lost-peer reports, and for a rank that exits 0 in
//     the middle of a call nobody reported stalled.
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
	// Issue 30's PyTorch case: rank 1 withholds AllReduce #3 past the
	// others' stall reports (they name it behind), then exits 0; they
	// fail on its loss (their words name it: "ended by rank 1") or as
	// their call gives up, and exit 1. The cause is rank 1, with its
	// status, never a rank that waited for it.
	const waited = `^ranks? [023](, [023])* stopped: peer rank 1 lost$`
	withheldThenExit := func(peers string) string {
		plan := "1=pid:p1,wait:w0,wait:w2,wait:w3,exit:0"
		for _, r := range []string{"0", "2", "3"} {
			plan += ";" + r + "=stall:3:1,touch:w" + r + ",gone:p1," + peers + "exit:1"
		}
		return plan
	}
	tests = append(tests, []struct {
		name, plan    string
		code          int
		first, second string
		log           string
	}{
		{name: "withheld, then exit 0: the others lose it",
			plan: withheldThenExit("peerlost:3:1,"), code: 1,
			first:  `^rank 1 ` + host + ` exited with status 0 while ranks 0, 2, 3 were in AllReduce #3 on communicator nccl@test/w \(it had not called it\)(; terminating \d+ other ranks?)?$`,
			second: waited},
		{name: "withheld, then exit 0: the others give up",
			plan: withheldThenExit(""), code: 1,
			first:  `^rank 1 ` + host + ` exited with status 0 while ranks 0, 2, 3 were in AllReduce #3 on communicator nccl@test/w \(it had not called it\)(; terminating \d+ other ranks?)?$`,
			second: waited},
		{name: "exit 0 in the middle of a call: the others lose it",
			plan: "1=pid:p1,wait:i0,wait:i2,wait:i3,exit:0;0=touch:i0,gone:p1,peerlost:3:1,exit:1;2=touch:i2,gone:p1,peerlost:3:1,exit:1;3=touch:i3,gone:p1,peerlost:3:1,exit:1", code: 1,
			first:  `^rank 1 ` + host + ` exited with status 0 while ranks? [023](, [023])* (was|were) in AllReduce #3 on communicator nccl@test/w(; terminating \d+ other ranks?)?$`,
			second: waited},
	}...)
	for _, tc := range tests {
		np := "3"
		if strings.Contains(tc.plan, "3=") {
			np = "4"
		}
		t.Run(tc.name, func(t *testing.T) {
			r := flexrun(t, runOpts{env: []string{"FLEXLINK_DEBUG=debug"}}, "-np", np, "--oversubscribe", "--kill-grace", "1s",
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
