package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// The emulated hosts of the ssh tests: two network namespaces with one
// NIC each, on their own subnet and names (so scripts/bench-launch-hosts.sh
// can run beside them).
const (
	clusterName = "flt"
	clusterNet  = "10.79"
)

// cluster is a running scripts/testcluster.
type cluster struct {
	dir       string
	sshConfig string
	hosts     []string // rail-0 addresses of h1, h2, ...
}

func newCluster(tc testenv.Testcluster) *cluster {
	return &cluster{dir: tc.Dir, sshConfig: tc.SSHConfig, hosts: tc.Hosts}
}

func missing(t *testing.T, component, why string) {
	t.Helper()
	testenv.Missing(t, component, why)
}

// testCluster returns the two-host cluster, starting it on first use.
func testCluster(t *testing.T) *cluster {
	t.Helper()
	return st.cluster.get(t, startCluster)
}

func startCluster() (*cluster, func(), string, error) {
	if os.Geteuid() != 0 {
		return nil, nil, "network namespaces: the ssh tests need root (ip netns, sshd)", nil
	}
	for _, c := range []struct{ component, path string }{
		{"iproute2", "ip"}, {"sshd", "/usr/sbin/sshd"}, {"ssh", "ssh"}, {"ssh-keygen", "ssh-keygen"},
	} {
		if _, err := exec.LookPath(c.path); err != nil {
			return nil, nil, c.component + ": " + c.path + " not found (apt-get install iproute2 openssh-client openssh-server)", nil
		}
	}
	if out, err := command("ip", "netns", "add", clusterName+"probe"); err != nil {
		return nil, nil, "network namespaces: ip netns add fails here: " + strings.TrimSpace(out), nil
	}
	command("ip", "netns", "del", clusterName+"probe")
	script := filepath.Join(st.bins.repo, "scripts", "testcluster")
	out, err := command(script, "up", "2", "--name", clusterName, "--net", clusterNet)
	if err != nil {
		command(script, "down", "--name", clusterName)
		return nil, nil, "", fmt.Errorf("scripts/testcluster up: %v", err)
	}
	tc, err := testenv.ParseTestcluster(out, 2)
	if err != nil {
		command(script, "down", "--name", clusterName)
		return nil, nil, "", err
	}
	return newCluster(tc), func() { command(script, "down", "--name", clusterName) }, "", nil
}

// flexrun runs flexrun with the cluster's ssh configuration and prefix.
func (c *cluster) flexrun(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	argv := append([]string{st.bins.flexrun, "--ssh-args", "-F " + c.sshConfig, "--prefix", st.bins.dir}, args...)
	return run(t, env, argv...)
}

// leftovers lists the processes in the cluster's namespaces other than
// sshd's, as "namespace pid command" lines.
func (c *cluster) leftovers() string {
	out, _ := command(filepath.Join(st.bins.repo, "scripts", "testcluster"), "pids", "--name", clusterName)
	return strings.TrimSpace(out)
}

// assertClean fails the test unless every process of the job has gone
// from every namespace within d.
func (c *cluster) assertClean(t *testing.T, d time.Duration) {
	t.Helper()
	var left string
	if !poll(d, func() bool { left = c.leftovers(); return left == "" }) {
		t.Errorf("processes left in the namespaces %v after the job:\n%s", d, left)
	}
}

// pidsIn returns the pids of processes in host i's namespace (1-based)
// whose command line contains substr.
func (c *cluster) pidsIn(t *testing.T, i int, substr string) []string {
	t.Helper()
	var pids []string
	out, _ := command("ip", "netns", "pids", fmt.Sprintf("%sh%d", clusterName, i))
	for _, p := range strings.Fields(out) {
		b, err := os.ReadFile("/proc/" + p + "/cmdline")
		if err == nil && strings.Contains(string(b), substr) {
			pids = append(pids, p)
		}
	}
	return pids
}

// TestTestcluster: scripts/testcluster builds the NICs, rails and rate
// limits it promises, and down leaves nothing behind.
func TestTestcluster(t *testing.T) {
	testCluster(t) // the same requirements
	script := filepath.Join(st.bins.repo, "scripts", "testcluster")
	const name, net = "flr", "10.80"
	if out, err := command(script, "up", "2", "--rails", "2", "--rate", "50mbit", "--name", name, "--net", net); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	defer command(script, "down", "--name", name)
	for h := 1; h <= 2; h++ {
		ns := fmt.Sprintf("%sh%d", name, h)
		for r := 0; r < 2; r++ {
			nic := fmt.Sprintf("rail%d", r)
			addr, _ := command("ip", "-n", ns, "-4", "-o", "addr", "show", "dev", nic)
			if want := fmt.Sprintf(" %s.%d.%d/24 ", net, r, h); !strings.Contains(addr, want) {
				t.Errorf("%s %s: %q, want%s", ns, nic, addr, want)
			}
			qdisc, _ := command("ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", nic)
			if !strings.Contains(qdisc, "tbf") || !strings.Contains(qdisc, "rate 50Mbit") {
				t.Errorf("%s %s qdisc %q, want tbf rate 50Mbit", ns, nic, qdisc)
			}
		}
		// Each host reaches the other on each rail (ssh as the probe).
		other := fmt.Sprintf("%s.1.%d", net, 3-h)
		cfg := filepath.Join("/tmp", "flexlink-testcluster-"+name, "ssh_config")
		if out, err := command("ip", "netns", "exec", ns, "ssh", "-F", cfg, "-o", "BatchMode=yes", other, "echo $FLEXLINK_HOSTNAME"); err != nil || strings.TrimSpace(out) != fmt.Sprintf("h%d", 3-h) {
			t.Errorf("ssh from %s to %s: %q, %v", ns, other, out, err)
		}
	}
	if out, err := command(script, "down", "--name", name); err != nil {
		t.Fatalf("down: %v %s", err, out)
	}
	nss, _ := command("ip", "netns", "list")
	links, _ := command("ip", "-br", "link")
	if strings.Contains(nss, name+"h") || strings.Contains(links, name) {
		t.Errorf("left after down: namespaces %q, links %q", nss, links)
	}
}
