package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRankFailureEndsJob(t *testing.T) {
	const ranks, failing = 4, 2
	tests := []struct {
		name   string
		how    string // envprobe fail's CODE
		code   int
		status string
	}{
		{"exit 3", "3", 3, "exited with status 3"},
		{"SIGKILL", "kill", 137, "was killed by signal 9 (killed)"},
	}
	host, _ := os.Hostname()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := startFlexrun(t, "-np", itoa(ranks), "--oversubscribe", bins.probe, "fail", itoa(failing), tc.how)
			pids := l.pids(t, ranks)
			// All ranks have printed their pid; the failing rank exits once
			// they all pass the barrier, so from here 3 s is the budget.
			if code := l.wait(t, 3*time.Second); code != tc.code {
				t.Errorf("flexrun exited %d, want %d; stderr:\n%s", code, tc.code, l.stderr)
			}
			for rank, pid := range pids {
				if alive(pid, "envprobe") {
					t.Errorf("rank %d (pid %d) still alive after flexrun exited", rank, pid)
				}
			}
			want := fmt.Sprintf("flexrun: rank %d (host %s, pid %d) %s; terminating %d other ranks\n", failing, host, pids[failing], tc.status, ranks-1)
			if !strings.Contains(l.stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, l.stderr)
			}
		})
	}
}

// TestSignalsToFlexrun: SIGINT and SIGTERM reach every rank as SIGTERM and
// end the job with 128+signal.
func TestSignalsToFlexrun(t *testing.T) {
	const ranks = 3
	tests := []struct {
		sig  syscall.Signal
		code int
		msg  string
	}{
		{syscall.SIGINT, 130, "flexrun: received SIGINT; terminating 3 ranks"},
		{syscall.SIGTERM, 143, "flexrun: received SIGTERM; terminating 3 ranks"},
	}
	for _, tc := range tests {
		t.Run(tc.sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			l := startFlexrun(t, "-np", itoa(ranks), "--oversubscribe", bins.probe, "hang", dir)
			l.pids(t, ranks) // every rank handles SIGTERM from now on
			if err := l.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := l.wait(t, 10*time.Second); code != tc.code {
				t.Errorf("flexrun exited %d, want %d", code, tc.code)
			}
			for rank := range ranks {
				if b, err := os.ReadFile(filepath.Join(dir, "term."+itoa(rank))); err != nil || string(b) != "TERM" {
					t.Errorf("rank %d did not get SIGTERM: %v", rank, err)
				}
			}
			if !strings.Contains(l.stderr.String(), tc.msg) {
				t.Errorf("stderr lacks %q:\n%s", tc.msg, l.stderr)
			}
		})
	}
}

func TestSIGUSR1Forwarded(t *testing.T) {
	const ranks = 2
	l := startFlexrun(t, "-np", itoa(ranks), "--oversubscribe", bins.probe, "hang", t.TempDir())
	l.pids(t, ranks)
	if err := l.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < ranks {
		select {
		case line := <-l.lines:
			if strings.HasPrefix(line, "usr1 ") {
				got[line] = true
			}
		case <-deadline:
			t.Fatalf("ranks that got SIGUSR1: %v", got)
		}
	}
	if !got["usr1 0"] || !got["usr1 1"] {
		t.Errorf("got %v", got)
	}
	if err := l.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := l.wait(t, 10*time.Second); code != 143 {
		t.Errorf("after SIGTERM flexrun exited %d, want 143", code)
	}
}

// TestFlexrunKilled: ranks die with flexrun even when it cannot tear them
// down (Pdeathsig).
func TestFlexrunKilled(t *testing.T) {
	const ranks = 3
	l := startFlexrun(t, "-np", itoa(ranks), "--oversubscribe", bins.probe, "hang", t.TempDir())
	pids := l.pids(t, ranks)
	if err := l.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l.wait(t, 10*time.Second)
	if sig, ok := signaled(l.cmd.ProcessState); !ok || sig != syscall.SIGKILL {
		t.Fatalf("flexrun ended with %v, not SIGKILL", l.cmd.ProcessState)
	}
	waitGone(t, pids, 3*time.Second)
}

func TestTimeout(t *testing.T) {
	const ranks = 2
	dir := t.TempDir()
	// A plain number is seconds, as mpirun's --timeout takes it.
	r := flexrun(t, runOpts{}, "--timeout", "1", "-np", itoa(ranks), "--oversubscribe", bins.probe, "hang", dir)
	if r.code != 124 || !strings.Contains(r.stderr, "flexrun: job timed out after 1s (--timeout); terminating 2 ranks") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	// Torn down like a failure: the ranks got SIGTERM.
	for rank := range ranks {
		if _, err := os.Stat(filepath.Join(dir, "term."+itoa(rank))); err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
}
