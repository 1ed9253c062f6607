package clustertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/ports"
)

// slurm is a two-node Slurm cluster made by scripts/testslurm: munged and
// slurmctld on this machine, one slurmd in each of two emulated hosts
// (network namespaces with host names tsl1 and tsl2), without systemd
// or cgroups. The script writes the configuration and names the nodes.
type slurm struct {
	dir   string
	conf  string   // SLURM_CONF
	nodes []string // node names, in order
}

// The cluster's name, address range and script directory, apart from
// scripts/testslurm's defaults so that a cluster a developer keeps up
// does not collide with the tests'.
const (
	slurmName = "tsl"
	slurmNet  = "10.76"
)

func testSlurm(t *testing.T) *slurm {
	t.Helper()
	return st.slurm.get(t, startSlurm)
}

// env is what Slurm's client commands need.
func (s *slurm) env() []string { return []string{"SLURM_CONF=" + s.conf} }

func startSlurm() (*slurm, func(), string, error) {
	if os.Geteuid() != 0 {
		return nil, nil, "Slurm: the Slurm tests run slurmd as root", nil
	}
	for _, p := range []string{"munged", "slurmctld", "slurmd", "srun", "salloc", "sbatch", "sinfo", "scancel", "ip", "unshare", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			return nil, nil, "Slurm: " + p + " not found (apt-get install slurmctld slurmd slurm-client munge iproute2)", nil
		}
	}
	if _, err := exec.LookPath("sshd"); err != nil {
		if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
			return nil, nil, "Slurm: sshd not found (scripts/testslurm builds on scripts/testcluster: apt-get install openssh-server)", nil
		}
	}
	var (
		out  []byte
		stop func()
		dir  string
	)
	// The controller's port is free when chosen but may be taken before
	// slurmctld binds it (it then exits, and testslurm says so): a new
	// port, at most three times.
	for try := 1; ; try++ {
		var err error
		if dir, err = os.MkdirTemp("", "flexlink-slurm-"); err != nil {
			return nil, nil, "", err
		}
		ports, err := freePorts(1)
		if err != nil {
			return nil, nil, "", err
		}
		script := filepath.Join(st.bins.repo, "scripts", "testslurm")
		stop = func() {
			exec.Command(script, "down", "--name", slurmName, "--dir", dir).Run()
			os.RemoveAll(dir)
		}
		up := exec.Command(script, "up", "2", "--name", slurmName, "--net", slurmNet, "--dir", dir, "--port", strconv.Itoa(ports[0]))
		var stderr strings.Builder
		up.Stderr = &stderr
		if out, err = up.Output(); err == nil {
			break
		}
		stop()
		if try == 3 || !strings.Contains(stderr.String(), "Address already in use") {
			return nil, nil, "", fmt.Errorf("scripts/testslurm up 2: %w\n%s", err, stderr.String())
		}
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
			vars[k] = strings.Trim(v, `"`)
		}
	}
	if vars["SLURM_CONF"] == "" || vars["TS_NODES"] == "" {
		stop()
		return nil, nil, "", fmt.Errorf("scripts/testslurm up 2 printed no SLURM_CONF or TS_NODES:\n%s", out)
	}
	return &slurm{dir: dir, conf: vars["SLURM_CONF"], nodes: strings.Split(vars["TS_NODES"], ",")}, stop, "", nil
}

// freePorts finds n free TCP ports on the loopback interface, below the
// kernel's ephemeral range: they are released for another program to bind,
// and no process's bind(0) or connect is handed one meanwhile.
func freePorts(n int) ([]int, error) {
	var ps []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := ports.ListenBelowEphemeral(context.Background(), "tcp", "127.0.0.1")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	return ps, nil
}

// TestSrunWithoutFlexrun: `srun -n 4 ./train`: rank.Init reads the step's
// SLURM_* variables and rank 0 serves the bootstrap.
func TestSrunWithoutFlexrun(t *testing.T) {
	s := testSlurm(t)
	key := filepath.Join(t.TempDir(), "job.key")
	p := run(t, append(s.env(), "FLEXLINK_KEY_FILE="+key), "srun", "-n", "4", st.bins.train, "-epochs", "3")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	for _, want := range []string{"epoch  3", "weights identical on all 4 ranks", "matches single-process training"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, p.out.String())
		}
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file %s: %v, mode %v; want it created with mode 0600", key, err, st.Mode().Perm())
	}
	// Each rank saw its place from Slurm: the spin probe prints it.
	p = run(t, append(s.env(), "FLEXLINK_KEY_FILE="+key), "srun", "-n", "3", st.bins.spin, "-iters", "2", "-env", "SLURM_PROCID,SLURM_LOCALID")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.err.String())
	}
	lines := joinedRE.FindAllStringSubmatch(p.out.String(), -1)
	if len(lines) != 3 {
		t.Fatalf("joined lines %q, want 3", lines)
	}
	for _, l := range lines {
		if want := " SLURM_PROCID=" + l[1] + " SLURM_LOCALID=" + l[1]; l[2] != "3" || l[5] != want {
			t.Errorf("line %q: want world 3 and%s", l[0], want)
		}
	}
}

// TestSrunSecretMismatch: tasks that derive different secrets (a key file
// not shared) fail with an error that says where the secret comes from.
func TestSrunSecretMismatch(t *testing.T) {
	s := testSlurm(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`FLEXLINK_KEY_FILE=%s/key.$SLURM_PROCID exec %s -iters 1`, dir, st.bins.spin)
	p := run(t, append(s.env(), "FLEXLINK_BOOTSTRAP_TIMEOUT=3s"), "srun", "-n", "2", "sh", "-c", script)
	code := p.wait(t, 60*time.Second)
	if code == 0 || !strings.Contains(p.err.String(), "job secret derived from "+dir+"/key.1: every host must hold the same file") {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure naming the key file", code, p.err.String())
	}
}

// TestSallocFlexrun: flexrun inside an allocation takes its hosts and
// slots from Slurm and starts its agents with srun: the ranks run in the
// agents' job step.
func TestSallocFlexrun(t *testing.T) {
	s := testSlurm(t)
	p := run(t, s.env(), "salloc", "-n", "4", st.bins.flexrun, st.bins.spin, "-iters", "3", "-env", "SLURM_STEP_ID,SLURM_JOB_NAME,FLEXLINK_LOCAL_SIZE")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	lines := joinedRE.FindAllStringSubmatch(p.out.String(), -1)
	if len(lines) != 4 {
		t.Fatalf("joined lines %q, want 4 (the allocation's tasks)", lines)
	}
	for _, l := range lines {
		if l[2] != "4" || !strings.HasPrefix(l[5], " SLURM_STEP_ID=") || !strings.HasSuffix(l[5], " SLURM_JOB_NAME=flexrun-agents FLEXLINK_LOCAL_SIZE=4") {
			t.Errorf("line %q: want world 4, inside the agents' step (flexrun-agents), local size 4", l[0])
		}
	}
}

// TestSbatchFlexrun: the same from a batch script; the job's output file
// holds the training's result.
func TestSbatchFlexrun(t *testing.T) {
	s := testSlurm(t)
	out := filepath.Join(t.TempDir(), "job.out")
	p := run(t, s.env(), "sbatch", "--parsable", "-n", "4", "-o", out, "--wrap", st.bins.flexrun+" "+st.bins.train+" -epochs 2; echo flexrun exit $?")
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("sbatch: exit %d, stderr:\n%s", code, p.err.String())
	}
	var text string
	if !poll(60*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		text = string(b)
		return strings.Contains(text, "flexrun exit")
	}) {
		t.Fatalf("batch job %s did not finish within 60 s; output so far:\n%s", strings.TrimSpace(p.out.String()), text)
	}
	for _, want := range []string{"weights identical on all 4 ranks", "matches single-process training", "flexrun exit 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("job output lacks %q:\n%s", want, text)
		}
	}
}

// nodeOf maps the joined lines of spin -env SLURMD_NODENAME to each
// rank's node, checking the world size and that FLEXLINK's host name and
// Slurm's node name agree.
func nodeOf(t *testing.T, out string, n int) map[string]string {
	t.Helper()
	lines := joinedRE.FindAllStringSubmatch(out, -1)
	if len(lines) != n {
		t.Fatalf("joined lines %q, want %d", lines, n)
	}
	node := map[string]string{}
	for _, l := range lines {
		if l[2] != strconv.Itoa(n) || l[5] != " SLURMD_NODENAME="+l[3] {
			t.Errorf("line %q: want world %d and SLURMD_NODENAME equal to the host name", l[0], n)
		}
		node[l[1]] = l[3]
	}
	return node
}

// TestSrunTwoNodes: bare `srun -N 2 -n 4` across the two emulated hosts:
// the training agrees, and ranks 0-1 run on the first node, 2-3 on the
// second (block distribution).
func TestSrunTwoNodes(t *testing.T) {
	s := testSlurm(t)
	env := append(s.env(), "FLEXLINK_KEY_FILE="+filepath.Join(t.TempDir(), "job.key"))
	p := run(t, env, "srun", "-N", "2", "-n", "4", "--ntasks-per-node", "2", st.bins.train, "-epochs", "2")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	for _, want := range []string{"weights identical on all 4 ranks", "matches single-process training"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, p.out.String())
		}
	}
	p = run(t, env, "srun", "-N", "2", "-n", "4", "--ntasks-per-node", "2", st.bins.spin, "-iters", "2", "-env", "SLURMD_NODENAME")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.err.String())
	}
	node := nodeOf(t, p.out.String(), 4)
	for r, want := range []string{s.nodes[0], s.nodes[0], s.nodes[1], s.nodes[1]} {
		if got := node[strconv.Itoa(r)]; got != want {
			t.Errorf("rank %d on %q, want %s", r, got, want)
		}
	}
}

// TestSallocTwoNodesFlexrun: `salloc -N 2 flexrun` runs flexrun here and
// its agents on both nodes; every rank joins, on both.
func TestSallocTwoNodesFlexrun(t *testing.T) {
	s := testSlurm(t)
	p := run(t, s.env(), "salloc", "-N", "2", "-n", "4", "--ntasks-per-node", "2", st.bins.flexrun, st.bins.spin, "-iters", "3", "-env", "SLURMD_NODENAME")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	count := map[string]int{}
	for _, n := range nodeOf(t, p.out.String(), 4) {
		count[n]++
	}
	if count[s.nodes[0]] != 2 || count[s.nodes[1]] != 2 {
		t.Errorf("ranks per node %v, want 2 on each of %v", count, s.nodes)
	}
}

// TestSrunRankKilledOnSecondNode: a rank killed on the second node ends
// the step; the others say which rank and node were lost.
func TestSrunRankKilledOnSecondNode(t *testing.T) {
	s := testSlurm(t)
	env := append(s.env(), "FLEXLINK_KEY_FILE="+filepath.Join(t.TempDir(), "job.key"))
	p := run(t, env, "srun", "-N", "2", "-n", "4", "--ntasks-per-node", "2", st.bins.spin, "-env", "SLURMD_NODENAME")
	lines := p.waitLines(t, joinedRE, 4, 60*time.Second)
	victim := ""
	for _, l := range lines {
		if l[1] == "3" {
			if l[3] != s.nodes[1] {
				t.Fatalf("rank 3 runs on %s, want %s", l[3], s.nodes[1])
			}
			victim = l[4]
		}
	}
	pid, err := strconv.Atoi(victim)
	if err != nil {
		t.Fatalf("no pid for rank 3 in %q", lines)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill rank 3 (pid %d): %v", pid, err)
	}
	code := p.wait(t, 60*time.Second)
	want := "rank 3 on host " + s.nodes[1] + " lost"
	if code == 0 || !strings.Contains(p.err.String(), want) {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure saying %q", code, p.err.String(), want)
	}
}
