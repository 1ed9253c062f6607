package clustertest

import (
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
)

var (
	joinedRE = regexp.MustCompile(`(?m)^joined rank (\d+) of (\d+) host (\S+) pid (\d+)(.*)$`)
	// firstCallRE is spin -say-first's line once its first allreduce is done.
	firstCallRE = regexp.MustCompile(`(?m)^first call done rank (\d+)$`)
	linkRE      = regexp.MustCompile(`link up: host=(\S+) rank=(\d+) comm=w peer=(\d+) peer_host=(\S+) kind=(\w+)`)
)

// TestSSHTrain runs examples/train on two emulated hosts over real ssh,
// and on this host plus one emulated host: the result is right, and the
// link report shows shm inside a host and tcp across hosts.
func TestSSHTrain(t *testing.T) {
	c := testCluster(t)
	here, _ := os.Hostname()
	tests := []struct {
		name  string
		hosts string
		env   []string
		host  map[string]string // rank -> host name the ranks report
	}{
		{"two remote hosts", c.hosts[0] + ":2," + c.hosts[1] + ":2", nil, map[string]string{"0": "h1", "1": "h1", "2": "h2", "3": "h2"}},
		// This host's ranks must reach the others on the bridge, theirs on their NIC.
		{"this host and a remote one", "localhost:2," + c.hosts[0] + ":2", []string{"FLEXLINK_SOCKET_IFNAME=" + clusterName + "br,rail"},
			map[string]string{"0": here, "1": here, "2": "h1", "3": "h1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := c.flexrun(t, append(tc.env, "FLEXLINK_DEBUG=INFO"), "-H", tc.hosts, st.bins.train, "-epochs", "3")
			if code := p.wait(t, 60*time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
			}
			for _, want := range []string{"epoch  3", "weights identical on all 4 ranks", "matches single-process training"} {
				if !strings.Contains(p.out.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, p.out.String())
				}
			}
			kinds := map[string]int{}
			for _, l := range linkRE.FindAllStringSubmatch(p.err.String(), -1) {
				host, r, peer, peerHost, kind := l[1], l[2], l[3], l[4], l[5]
				if host != tc.host[r] || peerHost != tc.host[peer] {
					t.Errorf("link %q: rank %s on %s, peer %s on %s; want %v", l[0], r, host, peer, peerHost, tc.host)
				}
				want := "net" // the network transport across hosts (FLEXLINK_TRANSPORT=auto)
				if host == peerHost {
					want = "shm"
				}
				if kind != want {
					t.Errorf("link %q: kind %s, want %s", l[0], kind, want)
				}
				kinds[kind]++
			}
			if kinds["shm"] == 0 || kinds["net"] == 0 {
				t.Errorf("link report has %d shm and %d net links, want both kinds; stderr:\n%s", kinds["shm"], kinds["net"], p.err.String())
			}
			c.assertClean(t, 5*time.Second)
		})
	}
}

// TestSSHPlacement checks ranks, local ranks and node ranks on two hosts
// under both mappings, and the environment the agents give the ranks.
func TestSSHPlacement(t *testing.T) {
	c := testCluster(t)
	tests := []struct {
		mapBy string
		host  []string // by rank
		local []int
	}{
		{"slot", []string{"h1", "h1", "h1", "h2"}, []int{0, 1, 2, 0}},
		{"node", []string{"h1", "h2", "h1", "h1"}, []int{0, 0, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.mapBy, func(t *testing.T) {
			p := c.flexrun(t, []string{"FLEXLINK_TIMEOUT=20s"}, "-np", "4", "--map-by", tc.mapBy, "-x", "EXPORTED=a,b",
				"-H", c.hosts[0]+":3,"+c.hosts[1]+":1", st.bins.spin, "-iters", "3",
				"-env", "FLEXLINK_LOCAL_RANK,FLEXLINK_LOCAL_SIZE,FLEXLINK_NODE_RANK,MASTER_ADDR,EXPORTED,FLEXLINK_TIMEOUT")
			if code := p.wait(t, 60*time.Second); code != 0 {
				t.Fatalf("exit %d\nstderr:\n%s", code, p.err.String())
			}
			lines := joinedRE.FindAllStringSubmatch(p.out.String(), -1)
			if len(lines) != 4 {
				t.Fatalf("%d joined lines, want 4:\n%s", len(lines), p.out.String())
			}
			size := map[string]int{}
			for _, h := range tc.host {
				size[h]++
			}
			for _, l := range lines {
				r, _ := strconv.Atoi(l[1])
				h := tc.host[r]
				node := map[string]int{"h1": 0, "h2": 1}[h]
				master := c.hosts[0] // rank 0 is on h1
				if h == "h1" {
					master = "127.0.0.1"
				}
				want := fmt.Sprintf(" FLEXLINK_LOCAL_RANK=%d FLEXLINK_LOCAL_SIZE=%d FLEXLINK_NODE_RANK=%d MASTER_ADDR=%s EXPORTED=a,b FLEXLINK_TIMEOUT=20s",
					tc.local[r], size[h], node, master)
				if l[3] != h || l[5] != want {
					t.Errorf("rank %d: host %s, env%s; want host %s, env%s", r, l[3], l[5], h, want)
				}
			}
		})
	}
}

// TestSSHStdinAndOutput: rank 0 on a remote host reads flexrun's stdin;
// output comes back in whole, tagged lines.
func TestSSHStdinAndOutput(t *testing.T) {
	c := testCluster(t)
	p := run(t, nil, "sh", "-c", fmt.Sprintf(`printf 'one\ntwo' | %s --ssh-args "-F %s" --prefix %s --tag-output -H %s:1,%s:1 sh -c 'if [ $FLEXLINK_RANK = 0 ]; then cat; echo; fi; printf "last line of %%s" $FLEXLINK_RANK'`,
		st.bins.flexrun, c.sshConfig, st.bins.dir, c.hosts[1], c.hosts[0]))
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, p.err.String())
	}
	got := strings.Split(strings.TrimSuffix(p.out.String(), "\n"), "\n")
	want := map[string]bool{"[1,0]<stdout>:one": true, "[1,0]<stdout>:two": true, "[1,0]<stdout>:last line of 0": true, "[1,1]<stdout>:last line of 1": true}
	if len(got) != len(want) {
		t.Fatalf("stdout %q, want the lines %v", got, want)
	}
	for _, l := range got {
		if !want[l] {
			t.Errorf("unexpected line %q in %q", l, got)
		}
	}
}

// startSpin starts spin on 2+2 ranks and waits until every rank has joined.
// It returns flexrun and the joined lines.
func startSpin(t *testing.T, c *cluster, extra ...string) (*proc, [][]string) {
	t.Helper()
	args := append([]string{"--agent-timeout", "3s", "--kill-grace", "1s", "-H", c.hosts[0] + ":2," + c.hosts[1] + ":2"}, extra...)
	p := c.flexrun(t, nil, append(args, st.bins.spin)...)
	return p, p.waitLines(t, joinedRE, 4, 30*time.Second)
}

// TestSSHRankKilled: a remote rank killed with SIGKILL ends the job on
// every host within 3 s, and flexrun names the rank and its host.
func TestSSHRankKilled(t *testing.T) {
	c := testCluster(t)
	p, lines := startSpin(t, c)
	var pid int
	for _, l := range lines {
		if l[1] == "3" {
			pid, _ = strconv.Atoi(l[4])
		}
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill rank 3 (pid %d): %v", pid, err)
	}
	code := p.wait(t, 10*time.Second)
	if took := p.end.Sub(killed); took > 3*time.Second {
		t.Errorf("flexrun ended %v after the kill, want within 3 s", took)
	}
	// The first line names rank 3; the others still running are
	// terminated, and those whose collective failed on the lost peer
	// first are named on a second line.
	want := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(fmt.Sprintf("flexrun: rank 3 (host %s, pid %d) was killed by signal 9 (killed)", c.hosts[1], pid)) +
		`(; terminating [1-3] other ranks?)?\n(flexrun: ranks? [0-2](, [0-2])* stopped: peer rank 3 lost\n)?`)
	if code != 137 || !want.MatchString(p.err.String()) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 137 and %q", code, p.err.String(), want)
	}
	c.assertClean(t, 3*time.Second)
}

// TestSSHConnectionKilled: killing the ssh client that carries one host
// kills that host's ranks (its agent sees the connection close) and ends
// the job, with flexrun naming the host.
func TestSSHConnectionKilled(t *testing.T) {
	c := testCluster(t)
	p, _ := startSpin(t, c)
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(p.cmd.Process.Pid), "-f", "ssh .* "+c.hosts[1]+" ").Output()
	pids := strings.Fields(string(out))
	if len(pids) != 1 {
		t.Fatalf("ssh clients to %s under flexrun: %q, want one", c.hosts[1], pids)
	}
	ssh, _ := strconv.Atoi(pids[0])
	killed := time.Now()
	syscall.Kill(ssh, syscall.SIGKILL)
	code := p.wait(t, 10*time.Second)
	if took := p.end.Sub(killed); took > 3*time.Second {
		t.Errorf("flexrun ended %v after the kill, want within 3 s", took)
	}
	// Ranks 0 and 1 are terminated, or named on a second line where their
	// collective failed on the lost ranks first (as in TestSSHRankKilled).
	// flexrun quotes the last line ssh printed between "(killed)" and the
	// ranks; on machines whose login shell runs pyenv that can be a stray
	// "pyenv: cannot rehash" line, so any such text is allowed there.
	want := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(fmt.Sprintf("flexrun: host %s lost: ssh to %s was killed by signal 9 (killed)", c.hosts[1], c.hosts[1])) +
		`(: [^\n]*)? ` + regexp.QuoteMeta("(ranks 2, 3 gone with it)") +
		`(; terminating [1-2] other ranks?)?\n(flexrun: ranks? [0-1](, 1)? stopped: peer host ` + regexp.QuoteMeta(c.hosts[1]) + ` lost\n)?`)
	if code != 1 || !want.MatchString(p.err.String()) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, p.err.String(), want)
	}
	c.assertClean(t, 3*time.Second)
}

// cutHost2 takes host 2's NIC down (up again when the test ends), waits up
// to d for p to end and checks that flexrun's first line of its own names
// host 2 lost to its agent's silence of agentTimeout, ranks 2 and 3 with
// it, within agentTimeout and 5 s of the cut. It returns p's exit code.
func cutHost2(t *testing.T, c *cluster, p *proc, agentTimeout, d time.Duration) int {
	t.Helper()
	veth := clusterName + "h2r0"
	cut := time.Now()
	if out, err := command("ip", "link", "set", veth, "down"); err != nil {
		t.Fatalf("cut the network: %v %s", err, out)
	}
	t.Cleanup(func() { command("ip", "link", "set", veth, "up") })
	code := p.wait(t, d)
	took := p.end.Sub(cut)
	first := ""
	for _, l := range strings.Split(p.err.String(), "\n") {
		if strings.HasPrefix(l, "flexrun: ") {
			first = l
			break
		}
	}
	t.Logf("exit %d %v after the cut: %q", code, took.Round(time.Millisecond), first)
	want := regexp.MustCompile(`^flexrun: host ` + regexp.QuoteMeta(c.hosts[1]) + ` lost: no word from its agent for ` + agentTimeout.String() + ` \(ranks 2, 3 gone with it\)`)
	if !want.MatchString(first) {
		t.Errorf("exit %d, first line %q, want %q; stderr:\n%s", code, first, want, p.err.String())
	}
	if took > agentTimeout+5*time.Second {
		t.Errorf("flexrun ended %v after the cut, want within the agent timeout (%v) and 5 s", took, agentTimeout)
	}
	return code
}

// TestSSHNetworkCut: with host 2's NIC down, flexrun loses it (no word
// within --agent-timeout) and names it first, never a rank of the healthy
// host (whose collectives fail on the lost peers before the agent's
// silence is over); host 2's ranks are gone too (its agent, its sshd, or
// the ranks themselves notice), and the job ends within the agent timeout
// and a few seconds.
func TestSSHNetworkCut(t *testing.T) {
	c := testCluster(t)
	p, _ := startSpin(t, c)
	if code := cutHost2(t, c, p, 3*time.Second, 15*time.Second); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	c.assertClean(t, 10*time.Second)
}

// TestSSHNetworkCutLinksFirst: the cut is seen first by the healthy
// host's ranks (their links to the cut host time out after 2 s, long
// before the agent's 12 s of silence): they fail on the lost peers, and
// flexrun waits for the host's fate instead of naming one of them.
func TestSSHNetworkCutLinksFirst(t *testing.T) {
	c := testCluster(t)
	args := []string{"--agent-timeout", "12s", "--kill-grace", "1s", "-x", "FLEXLINK_NET_TIMEOUT=2s", "-H", c.hosts[0] + ":2," + c.hosts[1] + ":2"}
	p := c.flexrun(t, nil, append(args, st.bins.spin, "-say-first")...)
	// The links are up (the premise: they fail first), not only joined.
	p.waitLines(t, firstCallRE, 4, 30*time.Second)
	cutHost2(t, c, p, 12*time.Second, 40*time.Second)
	c.assertClean(t, 10*time.Second)
}

// TestSSHPreflight: a host that cannot run the job is reported by name
// before any rank runs anywhere.
func TestSSHPreflight(t *testing.T) {
	c := testCluster(t)
	badKey := filepath.Join(t.TempDir(), "key")
	if out, err := command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", badKey); err != nil {
		t.Fatal(err, out)
	}
	absent := clusterNet + ".0.77" // on the subnet, but no such host
	tests := []struct {
		name  string
		flags []string
		hosts string
		want  string
	}{
		{"no flexrun there", []string{"--ssh-args", "-F " + c.sshConfig, "--prefix", "/nonexistent"}, c.hosts[0] + ":1," + c.hosts[1] + ":1",
			"host " + c.hosts[1] + ": ssh to " + c.hosts[1] + " exited with status 127: "},
		{"unreachable", []string{"--ssh-args", "-F " + c.sshConfig, "--prefix", st.bins.dir, "--connect-timeout", "1s"}, c.hosts[0] + ":1," + absent + ":1",
			"host " + absent + ": ssh to " + absent + " exited with status 255: ssh: connect to host " + absent + " port 22"},
		{"authentication refused", []string{"--ssh-args", "-F /dev/null -o IdentitiesOnly=yes -i " + badKey + " -o UserKnownHostsFile=" + filepath.Join(c.dir, "known_hosts"),
			"--prefix", st.bins.dir}, c.hosts[1] + ":2", "host " + c.hosts[1] + ": ssh to " + c.hosts[1] + " exited with status 255: " + "root@" + c.hosts[1] + ": Permission denied (publickey)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := run(t, nil, append(append([]string{st.bins.flexrun}, tc.flags...), "-H", tc.hosts, st.bins.spin)...)
			code := p.wait(t, 20*time.Second)
			if code != 1 || !strings.Contains(p.err.String(), "no rank was started") || !strings.Contains(p.err.String(), tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, p.err.String(), tc.want)
			}
			if p.out.String() != "" {
				t.Errorf("ranks ran: stdout %q", p.out.String())
			}
			c.assertClean(t, 3*time.Second)
		})
	}
}
