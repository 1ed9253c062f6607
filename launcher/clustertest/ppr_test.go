package clustertest

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/flexlink/flexlink/launcher"
)

// TestSSHMapByPPRNUMA: --map-by ppr:2:numa over two emulated hosts. The
// hosts' NUMA node counts come from their agents' hello (the plan is made
// again with them), each agent binds its ranks inside the node the plan
// put them in (--bind-to core: disjoint shares of it), and the reported
// bindings name that node and match each rank's Cpus_allowed_list.
func TestSSHMapByPPRNUMA(t *testing.T) {
	c := testCluster(t)
	numa, _ := launcher.CountDomains(func(string) (string, bool) { return "", false }, "")
	if numa < 1 {
		t.Fatalf("this machine's NUMA nodes could not be counted")
	}
	p := run(t, nil, st.bins.flexrun, "--ssh-args", "-F "+c.sshConfig, "--prefix", st.bins.dir+"/bin",
		"-H", c.hosts[0]+":8,"+c.hosts[1]+":8", "--map-by", "ppr:2:numa", "--bind-to", "core", "--report-bindings", "--tag-output",
		"grep", "Cpus_allowed_list", "/proc/self/status")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.err.String())
	}
	lineRE := regexp.MustCompile(`(?m)^\[1,(\d+)\]<stdout>:Cpus_allowed_list:\s*(\S+)$`)
	repRE := regexp.MustCompile(`(?m)^flexrun: \[([^\]]+)\] rank (\d+) \(local (\d+)\) bound to cpus (\S+) \(numa node (\d+)\)$`)
	got := map[int]string{}
	for _, m := range lineRE.FindAllStringSubmatch(p.out.String(), -1) {
		r, _ := strconv.Atoi(m[1])
		got[r] = m[2]
	}
	reps := repRE.FindAllStringSubmatch(p.err.String(), -1)
	want := 2 * 2 * numa // two hosts (emulated on this machine: its NUMA nodes)
	if len(got) != want || len(reps) != want {
		t.Fatalf("%d ranks printed, %d bindings reported, want %d; stdout:\n%s\nstderr:\n%s", len(got), len(reps), want, p.out.String(), p.err.String())
	}
	for _, m := range reps {
		r, _ := strconv.Atoi(m[2])
		local, _ := strconv.Atoi(m[3])
		if m[4] != got[r] {
			t.Errorf("rank %d: reported cpus %s, Cpus_allowed_list %s", r, m[4], got[r])
		}
		// Local rank l is in the host's node l/2 (nodes by id; numa
		// node ids here are 0..numa-1 on a machine without holes).
		if node, _ := strconv.Atoi(m[5]); numa == 1 && node != local/2 {
			t.Errorf("rank %d (local %d) on numa node %d, want %d", r, local, node, local/2)
		}
		if wantHost := c.hosts[r/(2*numa)]; m[1] != wantHost {
			t.Errorf("rank %d on %s, want %s", r, m[1], wantHost)
		}
	}
	c.assertClean(t, 5*time.Second)
}
