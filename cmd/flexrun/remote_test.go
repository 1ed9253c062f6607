package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The remote launch without sshd: a fake ssh that runs the remote command
// here, as host HOST (FLEXLINK_HOSTNAME=fake-HOST), so the agent protocol,
// placement and failure handling run for real on every machine. The real
// ssh into emulated hosts is tested in launcher/clustertest. The hosts are
// TEST-NET addresses: never local, never resolved, never contacted.
const fakeSSH = `#!/bin/sh
while [ "$1" != "--" ]; do shift; done
shift; host=$1; shift
if [ "$host" = 192.0.2.99 ]; then
	echo "ssh: connect to host $host port 22: Connection refused" >&2
	exit 255
fi
export FLEXLINK_HOSTNAME=fake-$host PATH=%s:$PATH
exec sh -c "$*"
`

// remoteArgs are the flexrun flags of a fake two-host launch.
func remoteArgs(t *testing.T, hosts string) []string {
	t.Helper()
	ssh := filepath.Join(t.TempDir(), "ssh")
	if err := os.WriteFile(ssh, []byte(fmt.Sprintf(fakeSSH, filepath.Dir(bins.flexrun))), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"--ssh", ssh, "--bootstrap-addr", "127.0.0.1", "-H", hosts}
}

func TestRemoteEnvironment(t *testing.T) {
	args := append(remoteArgs(t, "192.0.2.77:2,192.0.2.78:1"), "-x", "LR=0.1", bins.probe, "env")
	ps := reports(t, flexrun(t, runOpts{env: []string{"LR=ignored", "FLEXLINK_DEBUG=WARN"}}, args...), 3)
	want := []struct{ host, local, size, node string }{
		{"192.0.2.77", "0", "2", "0"}, {"192.0.2.77", "1", "2", "0"}, {"192.0.2.78", "0", "1", "1"},
	}
	for r, p := range ps {
		w := want[r]
		master := "127.0.0.1" // rank 0's host
		if w.host != want[0].host {
			master = want[0].host
		}
		for k, v := range map[string]string{
			"FLEXLINK_HOSTNAME": "fake-" + w.host, "FLEXLINK_LOCAL_RANK": w.local, "FLEXLINK_LOCAL_SIZE": w.size,
			"FLEXLINK_NODE_RANK": w.node, "FLEXLINK_WORLD_SIZE": "3", "FLEXLINK_GPU": "-1", "LR": "0.1",
			"FLEXLINK_DEBUG": "WARN", "MASTER_ADDR": master, "WORLD_SIZE": "3", "LOCAL_RANK": w.local,
		} {
			if got := p.Env[k]; got != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got, v)
			}
		}
		if b := p.Env["FLEXLINK_BOOTSTRAP"]; !strings.HasPrefix(b, "127.0.0.1:") {
			t.Errorf("rank %d: FLEXLINK_BOOTSTRAP=%q, want 127.0.0.1:PORT", r, b)
		}
	}
}

func TestRemoteRankFailure(t *testing.T) {
	args := append(remoteArgs(t, "192.0.2.77:2,192.0.2.78:2"), bins.probe, "fail", "2", "3")
	l := startFlexrun(t, args...)
	pids := l.pids(t, 4)
	if code := l.wait(t, 3*time.Second); code != 3 {
		t.Errorf("flexrun exited %d, want 3; stderr:\n%s", code, l.stderr)
	}
	want := fmt.Sprintf("flexrun: rank 2 (host 192.0.2.78, pid %d) exited with status 3; terminating 3 other ranks\n", pids[2])
	if !strings.Contains(l.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, l.stderr)
	}
	waitGone(t, pids, 3*time.Second)
}

func TestRemoteSignals(t *testing.T) {
	dir := t.TempDir()
	args := append(remoteArgs(t, "192.0.2.77:1,192.0.2.78:1"), bins.probe, "hang", dir)
	l := startFlexrun(t, args...)
	l.pids(t, 2)
	if err := l.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case line := <-l.lines:
			if strings.HasPrefix(line, "usr1 ") {
				got[line] = true
			}
		case <-deadline:
			t.Fatalf("ranks that got SIGUSR1: %v", got)
		}
	}
	if err := l.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := l.wait(t, 10*time.Second); code != 143 {
		t.Errorf("flexrun exited %d, want 143", code)
	}
	for rank := range 2 {
		if b, err := os.ReadFile(filepath.Join(dir, "term."+itoa(rank))); err != nil || string(b) != "TERM" {
			t.Errorf("rank %d did not get SIGTERM: %v", rank, err)
		}
	}
}

// TestRemoteFlexrunKilled: the ranks on the other hosts die with flexrun
// (its ssh goes, the agent sees its input end).
func TestRemoteFlexrunKilled(t *testing.T) {
	args := append(remoteArgs(t, "192.0.2.77:1,192.0.2.78:2"), bins.probe, "hang", t.TempDir())
	l := startFlexrun(t, args...)
	pids := l.pids(t, 3)
	if err := l.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l.wait(t, 10*time.Second)
	waitGone(t, pids, 5*time.Second)
}

func TestRemotePreflight(t *testing.T) {
	args := append(remoteArgs(t, "192.0.2.77:1,192.0.2.99:1"), bins.probe, "env")
	r := flexrun(t, runOpts{}, args...)
	want := "flexrun: cannot start flexrun's agent on 1 host; no rank was started\n  host 192.0.2.99: ssh to 192.0.2.99 exited with status 255: ssh: connect to host 192.0.2.99 port 22: Connection refused\n"
	if r.code != 1 || r.stderr != want || r.stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", r.code, r.stdout, r.stderr, want)
	}
}

// TestAgentCheck: `flexrun agent --check` says hello in the protocol's
// framing and exits 0 (what `ssh HOST flexrun agent --check` shows).
func TestAgentCheck(t *testing.T) {
	r := flexrun(t, runOpts{env: []string{"FLEXLINK_HOSTNAME=probe-host", "SSH_CONNECTION=10.1.2.3 50000 10.1.2.4 22"}}, "agent", "--check", "--node", "4")
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) != 5 || f[0] != "FLX1" || f[1] != "hello" || f[2] != "4" || f[3] != "-1" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want one hello frame from node 4", r.code, r.stdout, r.stderr)
	}
	hello, err := base64.RawStdEncoding.DecodeString(f[4])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"protocol":2`, `"host":"probe-host"`, `"client":"10.1.2.3"`} {
		if !strings.Contains(string(hello), want) {
			t.Errorf("hello %s lacks %s", hello, want)
		}
	}
}
