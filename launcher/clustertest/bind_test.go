package clustertest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/launcher"
)

// TestSSHBindings: -N 2 over two emulated hosts with --bind-to core; each
// agent binds its host's ranks (read back from each rank's
// Cpus_allowed_list), reports them, and --prefix names flexrun's bin
// directory instead of the install directory.
func TestSSHBindings(t *testing.T) {
	c := testCluster(t)
	p := run(t, nil, st.bins.flexrun, "--ssh-args", "-F "+c.sshConfig, "--prefix", st.bins.dir+"/bin",
		"-N", "2", "-H", c.hosts[0]+":2,"+c.hosts[1]+":2", "--bind-to", "core", "--report-bindings", "--tag-output",
		"grep", "Cpus_allowed_list", "/proc/self/status")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.err.String())
	}
	lineRE := regexp.MustCompile(`(?m)^\[1,(\d+)\]<stdout>:Cpus_allowed_list:\s*(\S+)$`)
	repRE := regexp.MustCompile(`(?m)^flexrun: \[([^\]]+)\] rank (\d+) \(local (\d+)\) bound to cpus (\S+)$`)
	got := map[int]string{}
	for _, m := range lineRE.FindAllStringSubmatch(p.out.String(), -1) {
		r, _ := strconv.Atoi(m[1])
		got[r] = m[2]
	}
	reps := repRE.FindAllStringSubmatch(p.err.String(), -1)
	if len(got) != 4 || len(reps) != 4 {
		t.Fatalf("%d ranks printed, %d bindings reported; stdout:\n%s\nstderr:\n%s", len(got), len(reps), p.out.String(), p.err.String())
	}
	byHost := map[string][]string{}
	for _, m := range reps {
		r, _ := strconv.Atoi(m[2])
		if m[4] != got[r] {
			t.Errorf("rank %d: reported cpus %s, Cpus_allowed_list %s", r, m[4], got[r])
		}
		byHost[m[1]] = append(byHost[m[1]], m[4])
	}
	for h, sets := range byHost {
		seen := map[int]bool{}
		for _, s := range sets {
			cpus, err := launcher.ParseCPUList(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cpus {
				if seen[c] {
					t.Errorf("host %s: cpu %d bound to two ranks (%s)", h, c, strings.Join(sets, " "))
				}
				seen[c] = true
			}
		}
	}
	c.assertClean(t, 5*time.Second)
}

// TestSallocFlexrunBindings: inside a Slurm allocation the agents (started
// by srun with --cpu-bind=none) bind the ranks themselves.
func TestSallocFlexrunBindings(t *testing.T) {
	s := testSlurm(t)
	p := run(t, s.env(), "salloc", "-n", "2", st.bins.flexrun, "--bind-to", "core", "--report-bindings", "--tag-output",
		"grep", "Cpus_allowed_list", "/proc/self/status")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	lineRE := regexp.MustCompile(`(?m)^\[1,(\d+)\]<stdout>:Cpus_allowed_list:\s*(\S+)$`)
	repRE := regexp.MustCompile(`(?m)^flexrun: \[[^\]]+\] rank (\d+) \(local \d+\) bound to cpus (\S+)$`)
	lines, reps := lineRE.FindAllStringSubmatch(p.out.String(), -1), repRE.FindAllStringSubmatch(p.err.String(), -1)
	if len(lines) != 2 || len(reps) != 2 {
		t.Fatalf("%d ranks printed, %d bindings reported; stdout:\n%s\nstderr:\n%s", len(lines), len(reps), p.out.String(), p.err.String())
	}
	got := map[string]string{lines[0][1]: lines[0][2], lines[1][1]: lines[1][2]}
	for _, m := range reps {
		if got[m[1]] != m[2] {
			t.Errorf("rank %s: reported %s, Cpus_allowed_list %s", m[1], m[2], got[m[1]])
		}
	}
	if got["0"] == got["1"] {
		t.Errorf("both ranks on cpus %s; want disjoint shares", got["0"])
	}
}
