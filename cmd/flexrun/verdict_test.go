package main

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestVerdict is issue 30's must-show: a rank misbehaves as spin's -bad
// says (exits 0 before joining or without Close, closes one collective
// early, calls another collective, count, dtype or root, claims another
// world size, never joins), and flexrun must end the job within the bound,
// with the cause on its first line (never a healthy rank) and the exit
// status expected. Rank 1 misbehaves at its call number 5 (from 0), so
// the others are in collective #6 of the world communicator "w".
func TestVerdict(t *testing.T) {
	const (
		host = `\(host \S+, pid \d+\)`
		fast = 5 * time.Second // the goal is 2 s; the CI machine is loaded
	)
	tests := []struct {
		name    string
		np      int
		bad     string
		flags   []string // flexrun's, before the program
		code    int
		first   string // flexrun's first line, a regexp
		second  string // its second line, a regexp ("": none expected)
		within  time.Duration
		absent  []string // must not be on the first line
		spinArg []string
	}{
		{name: "exit 0 before join", np: 3, bad: "exit-before-join", code: 1,
			first: `^rank 1 ` + host + ` exited with status 0 before joining the job; terminating 2 other ranks$`, within: fast},
		{name: "exit 0 without Close", np: 3, bad: "exit-no-close", code: 1,
			first:  `^rank 1 ` + host + ` exited with status 0 without closing the job \(its bootstrap connection ended before its goodbye\)`,
			second: `^ranks 0, 2 stopped: peer rank 1 lost$`, within: fast},
		{name: "one collective fewer then Close", np: 3, bad: "close", code: 3,
			first:  `^rank 1 ` + host + ` closed communicator w after 5 collectives while ranks? [0-9, ]+ (was|were) in allreduce #6 \(collective mismatch\)`,
			second: `^ranks 0, 2 stopped: collective mismatch$`, within: fast},
		{name: "one collective fewer then Close, 4 ranks over tcp", np: 4, bad: "close", flags: []string{"-x", "FLEXLINK_TRANSPORT=tcp"}, code: 3,
			first:  `^rank 1 ` + host + ` closed communicator w after 5 collectives while ranks? [0-9, ]+ (was|were) in allreduce #6 \(collective mismatch\)`,
			second: `^ranks 0, 2, 3 stopped: collective mismatch$`, within: fast},
		{name: "exit 0 without Close over tcp", np: 2, bad: "exit-no-close", flags: []string{"-x", "FLEXLINK_TRANSPORT=tcp"}, code: 1,
			first:  `^rank 1 ` + host + ` exited with status 0 without closing the job \(its bootstrap connection ended before its goodbye\)`,
			second: `^rank 0 stopped: peer rank 1 lost$`, within: fast},
		{name: "op, 2 ranks", np: 2, bad: "op", code: 3,
			first: `^collective mismatch on communicator w: rank 0 called allreduce count=1 double sum \(call #6, \w+\), rank 1 called allgather count=1 double \(call #6, \w+\) \(differs: collective, op`, within: fast},
		{name: "op, 4 ranks", np: 4, bad: "op", code: 3,
			first: `^collective mismatch on communicator w: rank \d called .*rank 1 called allgather count=1 double \(call #6`, within: fast},
		{name: "op, 3 ranks over tcp", np: 3, bad: "op", flags: []string{"-x", "FLEXLINK_TRANSPORT=tcp"}, code: 3,
			first: `^collective mismatch on communicator w: rank \d called .*rank 1 called allgather count=1 double \(call #6`, within: fast},
		{name: "count", np: 3, bad: "count", code: 3,
			first: `^collective mismatch on communicator w: rank \d called .*rank 1 called allreduce count=2 double sum \(call #6, \w+\).*differs: count`, within: fast},
		{name: "count over tcp", np: 2, bad: "count", flags: []string{"-x", "FLEXLINK_TRANSPORT=tcp"}, code: 3,
			// The tcp link sees the sizes differ before the headers do: the
			// words are rank 0's, naming its call and rank 1's message.
			// (rank 1 says so too, naming both calls, unless rank 0's word
			// reached it first).
			first: `^collective mismatch on communicator w: (rank 0 called allreduce count=1 double sum \(call #6, \w+\), rank 1 called allreduce count=2 double sum|rank 0 .*allreduce count=1 double sum \(call #6, \w+\): recv from rank 1.* has 16 bytes, its buffer 8: collective mismatch$)`, within: fast},
		{name: "dtype", np: 4, bad: "dtype", code: 3,
			first: `^collective mismatch on communicator w: rank \d called .*rank 1 called allreduce count=1 float sum \(call #6, \w+\).*differs: dtype`, within: fast},
		{name: "root", np: 3, bad: "root", code: 3,
			first: `^collective mismatch on communicator w: rank [0-2] called broadcast .*rank 1 called broadcast count=1 double root=1 \(call #6, \w+\)|rank 1 called broadcast count=1 double root=1 \(call #6, \w+\), rank 2 called broadcast count=1 double root=0 .*\(differs: root`, within: fast},
		{name: "wrong world size", np: 3, bad: "wrong-size", code: 1,
			first: `^rank 1 ` + host + ` exited with status 1 before joining the job: the bootstrap refused it: rank 1 says the job has 4 ranks, the server 3; terminating 2 other ranks$`, within: fast},
		{name: "withholds a collective", np: 3, bad: "withhold", flags: []string{"-x", "FLEXLINK_TIMEOUT=1s"}, code: 3,
			first:  `^rank 1 ` + host + ` did not take part in allreduce #6 on communicator w: (ranks 0, 2|rank 0|rank 2) timed out waiting for it$`,
			second: `^ranks 0, 2 stopped: timed out waiting for rank 1$`, within: time.Second + fast},
		{name: "never joins", np: 3, bad: "never-join", flags: []string{"--bootstrap-timeout", "2s"}, code: 1,
			first:  `^rank 1 ` + host + ` never joined the job within the bootstrap timeout \(2s\)$`,
			second: `^ranks 0, 2 stopped: waiting for rank 1 to join$`, within: 2*time.Second + fast},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-np", itoa(tc.np), "--oversubscribe", "--kill-grace", "1s"}, tc.flags...)
			args = append(args, bins.spin, "-iters", "40", "-tick", "10ms", "-bad-rank", "1", "-bad", tc.bad, "-bad-at", "5")
			r := flexrun(t, runOpts{}, args...)
			lines := flexrunLines(r.stderr)
			t.Logf("%s: exit %d after %v: %q", tc.name, r.code, r.elapsed.Round(time.Millisecond), lines)
			if r.code != tc.code {
				t.Errorf("exit status %d, want %d", r.code, tc.code)
			}
			if r.elapsed > tc.within {
				t.Errorf("flexrun took %v, want at most %v", r.elapsed, tc.within)
			}
			if len(lines) == 0 || !regexp.MustCompile(tc.first).MatchString(lines[0]) {
				t.Errorf("flexrun's first line does not match %q", tc.first)
			}
			if tc.second != "" && (len(lines) < 2 || !regexp.MustCompile(tc.second).MatchString(lines[1])) {
				t.Errorf("flexrun's second line does not match %q", tc.second)
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", r.stderr)
			}
		})
	}
}

// flexrunLines are flexrun's own "flexrun: " lines of stderr, prefix cut.
func flexrunLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if s, ok := strings.CutPrefix(l, "flexrun: "); ok {
			out = append(out, s)
		}
	}
	return out
}

// TestPausedFlexrun: flexrun stopped for 10 s (SIGSTOP: a debugger, a
// loaded login node) does not end a healthy job: the ranks' silence limit
// (FLEXLINK_LIVENESS_TIMEOUT, 30 s by default) outlasts it, and the job
// completes with status 0.
func TestPausedFlexrun(t *testing.T) {
	// 2 ranks, about 14 s of allreduces: the pause falls inside the job.
	l := startFlexrun(t, "-np", "2", "--oversubscribe", bins.spin, "-iters", "700", "-tick", "20ms")
	joined := 0
	for joined < 2 {
		line, ok := <-l.lines
		if !ok {
			t.Fatalf("flexrun's stdout ended before both ranks joined; stderr:\n%s", l.stderr)
		}
		if strings.HasPrefix(line, "joined rank") {
			joined++
		}
	}
	pid := l.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The pause is the scenario under test, not a wait for a condition.
	pause := time.NewTimer(10 * time.Second)
	<-pause.C
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := l.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("flexrun paused 10 s exited %d, want 0; stderr:\n%s", code, l.stderr)
	}
	if s := l.stderr.String(); strings.Contains(s, "lost") {
		t.Errorf("stderr reports a loss:\n%s", s)
	}
}
