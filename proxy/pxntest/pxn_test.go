package pxntest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// The cluster's name and network are this package's own (COMMON.md);
// PXNTEST_NAME and PXNTEST_NET (a.b) give another, so that two checkouts
// can run the tests side by side.
const (
	rails = 4
	per   = 4 // ranks per host
)

var name, net = envOr("PXNTEST_NAME", "pxn"), envOr("PXNTEST_NET", "10.81")

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// cluster is what TestMain set up: "" dir when the tests cannot run.
var cluster struct {
	skip, why     string // component missing, and why
	err           error
	prefix, sshCf string
	hosts         []string
}

func TestMain(m *testing.M) {
	code := func() int {
		setup()
		defer teardown()
		return m.Run()
	}()
	os.Exit(code)
}

func repo() string { r, _ := filepath.Abs("../.."); return r }

func script() string { return filepath.Join(repo(), "scripts", "testcluster") }

func setup() {
	if os.Geteuid() != 0 {
		cluster.skip, cluster.why = "network namespaces", "the emulated cluster needs root (ip netns, sshd)"
		return
	}
	for _, c := range []struct{ component, path string }{
		{"iproute2", "ip"}, {"tc", "tc"}, {"sshd", "/usr/sbin/sshd"}, {"ssh", "ssh"}, {"ssh-keygen", "ssh-keygen"},
	} {
		if _, err := exec.LookPath(c.path); err != nil {
			cluster.skip, cluster.why = c.component, c.path+" not found (apt-get install iproute2 openssh-client openssh-server)"
			return
		}
	}
	dir, err := os.MkdirTemp("", "flexlink-pxntest-")
	if err != nil {
		cluster.err = err
		return
	}
	os.Chmod(dir, 0o755)
	cluster.prefix = dir
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "bin")+"/", "./cmd/flexrun", "./proxy/pxntest/testdata/a2a")
	cmd.Dir = repo()
	if out, err := cmd.CombinedOutput(); err != nil {
		cluster.err = fmt.Errorf("go build flexrun a2a: %v\n%s", err, out)
		return
	}
	// Rails of 400 Mbit/s each, a spine of 100 Mbit/s in all (16:1).
	out, err := exec.Command(script(), "up", "2", "--rails", strconv.Itoa(rails), "--rate", "400mbit", "--spine", "100mbit",
		"--name", name, "--net", net).CombinedOutput()
	if err != nil {
		cluster.err = fmt.Errorf("scripts/testcluster up: %v\n%s", err, out)
		return
	}
	tc, err := testenv.ParseTestcluster(string(out), 2)
	cluster.sshCf, cluster.hosts, cluster.err = tc.SSHConfig, tc.Hosts, err
}

func teardown() {
	if cluster.prefix != "" {
		exec.Command(script(), "down", "--name", name).Run()
		os.RemoveAll(cluster.prefix)
	}
}

func need(t *testing.T) {
	t.Helper()
	if cluster.skip != "" {
		testenv.Missing(t, cluster.skip, cluster.why)
	}
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
}

// spineBytes is what the root namespace forwarded onto the rail bridges.
func spineBytes(t *testing.T) int64 {
	t.Helper()
	var sum int64
	for r := range rails {
		b, err := os.ReadFile(fmt.Sprintf("/sys/class/net/%sbr%d/statistics/tx_bytes", name, r))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		sum += n
	}
	return sum
}

// job runs a2a on 2 hosts × per ranks with FLEXLINK_PXN=level and returns
// its exit code, stdout and stderr, killing it after limit.
func job(t *testing.T, level string, limit time.Duration, args ...string) (int, string, string) {
	t.Helper()
	return jobEnv(t, []string{"FLEXLINK_PXN=" + level}, limit, args...)
}

// jobEnv is job with the settings env (NAME=value) passed to every rank.
func jobEnv(t *testing.T, env []string, limit time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	argv := []string{"--ssh-args", "-F " + cluster.sshCf, "--prefix", cluster.prefix,
		"-H", fmt.Sprintf("%s:%d,%s:%d", cluster.hosts[0], per, cluster.hosts[1], per)}
	set := map[string]bool{}
	for _, e := range env {
		set[strings.SplitN(e, "=", 2)[0]] = true
	}
	for _, e := range []string{"FLEXLINK_NET=tcp", "FLEXLINK_NET_IFNAME=rail"} { // unless env says
		if !set[strings.SplitN(e, "=", 2)[0]] {
			env = append(env, e)
		}
	}
	for _, e := range env {
		argv = append(argv, "-x", e)
	}
	argv = append(append(argv, filepath.Join(cluster.prefix, "bin", "a2a")), args...)
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.prefix, "bin", "flexrun"), argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("flexrun still running after %v\nstdout:\n%s\nstderr:\n%s", limit, out.String(), errb.String())
	}
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return code, out.String(), errb.String()
}

var countersRE = regexp.MustCompile(`pxn counters: rank=(\d+) nic=(\S+) bytes=(\d+) messages=(\d+) relayed=(\d+) received=(\d+) receives=(\d+)`)

type totals struct{ bytes, messages, relayed, received, receives, ranks int64 }

func parseCounters(t *testing.T, out string) totals {
	t.Helper()
	var tot totals
	for _, m := range countersRE.FindAllStringSubmatch(out, -1) {
		v := func(i int) int64 { n, _ := strconv.ParseInt(m[i], 10, 64); return n }
		if r := v(1); m[2] != fmt.Sprintf("rail%d", r%per) {
			t.Errorf("rank %d sent on %s, want its own rail%d", r, m[2], r%per)
		}
		tot.bytes += v(3)
		tot.messages += v(4)
		tot.relayed += v(5)
		tot.received += v(6)
		tot.receives += v(7)
		tot.ranks++
	}
	if tot.ranks != 2*per {
		t.Fatalf("%d ranks printed counters, want %d:\n%s", tot.ranks, 2*per, out)
	}
	return tot
}

// TestSpine: all-to-all and AllToAllv (random uneven counts), checked on
// every rank by the program, with PXN on (level 2) and off (level 0: each
// rank sends from its own NIC). With PXN the spine forwards under 1% of
// the payload; without, the cross-rail part (3/4 with 4 rails) crosses
// it. Receives posted drop by the aggregation factor (4 local senders per
// relay).
func TestSpine(t *testing.T) {
	need(t)
	got := map[string]totals{}
	spine := map[string]int64{}
	for _, level := range []string{"2", "0"} {
		before := spineBytes(t)
		code, out, errs := job(t, level, 40*time.Second, "-size", "262144", "-iters", "2")
		if code != 0 {
			t.Fatalf("PXN %s: flexrun exit %d\nstdout:\n%s\nstderr:\n%s", level, code, out, errs)
		}
		spine[level] = spineBytes(t) - before
		got[level] = parseCounters(t, out)
		t.Logf("FLEXLINK_PXN=%s: spine %d bytes, counters %+v", level, spine[level], got[level])
	}
	on, off := got["2"], got["0"]
	if on.bytes != off.bytes || on.bytes == 0 {
		t.Errorf("cross-host payload %d bytes with PXN, %d without: want the same, not 0", on.bytes, off.bytes)
	}
	if spine["2"]*100 >= on.bytes {
		t.Errorf("PXN on: the spine forwarded %d bytes of %d (>= 1%%)", spine["2"], on.bytes)
	}
	if spine["0"] < off.bytes*6/10 {
		t.Errorf("PXN off: the spine forwarded %d bytes of %d, want the cross-rail part (about 3/4)", spine["0"], off.bytes)
	}
	if off.relayed != 0 || on.relayed == 0 {
		t.Errorf("relayed %d with PXN, %d without", on.relayed, off.relayed)
	}
	if off.receives != off.received || on.receives*3 > off.receives {
		t.Errorf("receives posted: %d with PXN, %d without (for %d messages): want a drop by about 4", on.receives, off.receives, off.received)
	}
}

// TestKilled: a rank killed mid-all-to-all (rank 1, a relay for rail 1 on
// the first host) and a rank of the second host (rank 6, relay for rail
// 2) end the job: flexrun exits non-zero within the deadline naming the
// rank, and nothing is left running in the namespaces.
func TestKilled(t *testing.T) {
	need(t)
	for _, c := range []struct{ kill, rank string }{{"1:0", "1"}, {"6:2", "6"}} {
		t.Run("rank"+c.rank, func(t *testing.T) {
			start := time.Now()
			shmBefore := shmEntries(t)
			code, out, errs := job(t, "2", 30*time.Second, "-size", "1048576", "-iters", "2", "-kill", c.kill)
			checkKilled(t, c.rank, start, shmBefore, code, out, errs)
		})
	}
}

// checkKilled checks a job in which rank victim killed itself: flexrun
// exited non-zero naming the rank, within 5 s of the kill, with nothing
// left in /dev/shm (shmBefore: what was there before) or the namespaces.
func checkKilled(t *testing.T, victim string, start time.Time, shmBefore []string, code int, out, errs string) {
	t.Helper()
	took := time.Since(start)
	end := time.Now()
	if code == 0 {
		t.Fatalf("the job succeeded with rank %s killed\nstdout:\n%s\nstderr:\n%s", victim, out, errs)
	}
	if !regexp.MustCompile(`rank ` + victim + `\b`).MatchString(errs) {
		t.Errorf("stderr does not name rank %s:\n%s", victim, errs)
	}
	t.Logf("exit %d after %v; stderr tail:\n%s", code, took.Round(time.Millisecond), tail(errs, 6))
	// Every rank has gone within 5 s of the kill (flexrun exits after the last).
	if m := killedRE.FindStringSubmatch(errs); m == nil {
		t.Errorf("rank %s did not say when it killed itself", victim)
	} else if ms, _ := strconv.ParseInt(m[1], 10, 64); end.Sub(time.UnixMilli(ms)) > 5*time.Second {
		t.Errorf("flexrun exited %v after the kill, want within 5 s", end.Sub(time.UnixMilli(ms)))
	}
	if after := shmEntries(t); len(after) > len(shmBefore) {
		t.Errorf("/dev/shm had %d entries before the job, %d after: %v", len(shmBefore), len(after), after)
	}
	deadline := time.Now().Add(5 * time.Second)
	var left string
	for time.Now().Before(deadline) {
		o, _ := exec.Command(script(), "pids", "--name", name).CombinedOutput()
		if left = strings.TrimSpace(string(o)); left == "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if left != "" {
		t.Errorf("processes left in the namespaces:\n%s", left)
	}
}

var killedRE = regexp.MustCompile(`a2a: rank \d+ kills itself at (\d+)`)

// shmEntries lists flexlink's entries in /dev/shm (shared memory left
// behind would show there).
func shmEntries(t *testing.T) []string {
	t.Helper()
	es, err := os.ReadDir("/dev/shm")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range es {
		if strings.Contains(e.Name(), "flexlink") { // (flexlink's segments are unnamed memfds: expect none)
			out = append(out, e.Name())
		}
	}
	return out
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
