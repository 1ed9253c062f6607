package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
	"github.com/flexlink/flexlink/launcher"
)

// rankCPUs runs flexrun with args and a rank that prints its
// Cpus_allowed_list from /proc/self/status; it returns each rank's CPUs
// and flexrun's stderr.
func rankCPUs(t *testing.T, env []string, args ...string) (map[int][]int, string) {
	t.Helper()
	args = append(args, "--tag-output", "grep", "Cpus_allowed_list", "/proc/self/status")
	r := flexrun(t, runOpts{env: env}, args...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	re := regexp.MustCompile(`^\[1,(\d+)\]<stdout>:Cpus_allowed_list:\s*(\S+)$`)
	got := map[int][]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("stdout line %q", line)
		}
		rank, _ := strconv.Atoi(m[1])
		cpus, err := launcher.ParseCPUList(m[2])
		if err != nil {
			t.Fatal(err)
		}
		got[rank] = cpus
	}
	return got, r.stderr
}

// myCPUs is this test process's affinity, which flexrun inherits.
func myCPUs(t *testing.T) []int {
	t.Helper()
	tp, err := launcher.LoadCPUTopology(launcher.BindCore, settings.Map(nil), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.CPUs) < 2 {
		testenv.MissingHardware(t, "2 CPUs", "binding two ranks apart needs two CPUs")
	}
	return tp.CPUs
}

// reported reads --report-bindings lines: rank -> cpulist.
func reported(t *testing.T, stderr string) map[int]string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^flexrun: \[[^\]]+\] rank (\d+) \(local \d+\) bound to cpus (\S+)`)
	out := map[int]string{}
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		r, _ := strconv.Atoi(m[1])
		out[r] = m[2]
	}
	return out
}

func TestBindToCore(t *testing.T) {
	all := myCPUs(t)
	got, stderr := rankCPUs(t, nil, "-np", "2", "--bind-to", "core", "--report-bindings")
	if len(got) != 2 {
		t.Fatalf("ranks seen: %v", got)
	}
	seen := map[int]bool{}
	for r, cpus := range got {
		if len(cpus) == 0 {
			t.Errorf("rank %d: no cpus", r)
		}
		for _, c := range cpus {
			if seen[c] {
				t.Errorf("cpu %d given to two ranks: %v", c, got)
			}
			seen[c] = true
		}
		if rep := reported(t, stderr)[r]; rep != launcher.FormatCPUList(cpus) {
			t.Errorf("rank %d: reported %q, Cpus_allowed_list %v", r, rep, cpus)
		}
	}
	if len(seen) != len(all) {
		t.Errorf("ranks got cpus %v, want all of %v shared out", got, all)
	}
}

func TestBindToNone(t *testing.T) {
	all := myCPUs(t)
	got, stderr := rankCPUs(t, nil, "-np", "2", "--report-bindings")
	for r, cpus := range got {
		if !reflect.DeepEqual(cpus, all) {
			t.Errorf("rank %d: %v, want flexrun's %v", r, cpus, all)
		}
	}
	if n := strings.Count(stderr, ") not bound"); n != 2 {
		t.Errorf("stderr %q: want 2 'not bound' lines", stderr)
	}
}

// twoNUMA writes a topology file with two NUMA nodes, cpu 0 and cpu 1, and
// no GPU, and returns its path and the environment of ranks on it; it
// skips where this process may not run on both cpus.
func twoNUMA(t *testing.T) (file string, env []string) {
	t.Helper()
	all := myCPUs(t)
	if all[0] != 0 || all[1] != 1 {
		testenv.MissingHardware(t, "cpus 0 and 1", "the topology file names them")
	}
	f := filepath.Join(t.TempDir(), "topo.json")
	js := `{"hostname": "x", "numa": [{"id": 0, "cpus": "0"}, {"id": 1, "cpus": "1"}], "gpus": [], "nics": []}`
	if err := os.WriteFile(f, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return f, []string{"FLEXLINK_TOPO_FILE=" + f, "CUDA_VISIBLE_DEVICES="}
}

// TestBindToNUMA reads a topology with two NUMA nodes (cpu 0 and cpu 1)
// from FLEXLINK_TOPO_FILE; the ranks have no GPU, so they go round-robin.
func TestBindToNUMA(t *testing.T) {
	_, env := twoNUMA(t)
	got, stderr := rankCPUs(t, env, "-np", "2", "--bind-to", "numa", "--report-bindings")
	want := map[int][]int{0: {0}, 1: {1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Cpus_allowed_list by rank %v, want %v", got, want)
	}
	if !strings.Contains(stderr, "rank 1 (local 1) bound to cpus 1 (numa node 1)") {
		t.Errorf("stderr %q", stderr)
	}
}

func TestNPerNodeDryRun(t *testing.T) {
	for _, args := range [][]string{{"-N", "1"}, {"--npernode", "1"}, {"--nproc-per-node", "1"}, {"--map-by", "ppr:1:node"}} {
		r := flexrun(t, runOpts{}, append(args, "-H", "localhost:2,203.0.113.7:2", "--dry-run", "true")...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "dry run: 2 ranks") || !regexp.MustCompile(`(?m)^1\s+203\.0\.113\.7\s+1\s+0\s+1`).MatchString(r.stdout) {
			t.Errorf("%v: %s", args, r.stdout)
		}
	}
}

// TestOutputFilename: OpenMPI 4.1's layout, DIR/1/rank.N/stdout and stderr.
func TestOutputFilename(t *testing.T) {
	dir := t.TempDir()
	r := flexrun(t, runOpts{}, "-np", "2", "--output-filename", dir, "sh", "-c", `echo out $FLEXLINK_RANK; echo err $FLEXLINK_RANK >&2`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for rank := range 2 {
		for _, s := range []string{"out", "err"} {
			b, err := os.ReadFile(filepath.Join(dir, "1", "rank."+itoa(rank), "std"+s))
			if want := s + " " + itoa(rank) + "\n"; err != nil || string(b) != want {
				t.Errorf("rank %d std%s: %q, %v; want %q", rank, s, b, err, want)
			}
		}
	}
}

func TestTimestampOutput(t *testing.T) {
	before := time.Now().Add(-time.Second).Truncate(time.Second)
	r := flexrun(t, runOpts{}, "-np", "1", "--timestamp-output", "--tag-output", "sh", "-c", "echo hi; echo oops >&2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, c := range []struct{ out, rest string }{{r.stdout, "[1,0]<stdout>:hi"}, {r.stderr, "[1,0]<stderr>:oops"}} {
		line := strings.TrimSpace(c.out)
		if len(line) < len(launcher.StampLayout) {
			t.Fatalf("line %q", line)
		}
		stamp, rest := line[:len(launcher.StampLayout)], line[len(launcher.StampLayout):]
		at, err := time.ParseInLocation(launcher.StampLayout, stamp, time.Local)
		if err != nil || rest != c.rest || at.Before(before) || at.After(time.Now()) {
			t.Errorf("line %q: stamp %v (%v), rest %q; want %q", c.out, at, err, rest, c.rest)
		}
	}
}

// TestRemoteFlexrunMissing: an ssh whose remote shell does not find
// flexrun (status 127) gets a hint of --prefix.
func TestRemoteFlexrunMissing(t *testing.T) {
	ssh := filepath.Join(t.TempDir(), "fake-ssh")
	if err := os.WriteFile(ssh, []byte("#!/bin/sh\necho 'bash: line 1: flexrun: command not found' >&2\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := flexrun(t, runOpts{}, "-H", "203.0.113.7:1", "--ssh", ssh, "true")
	want := "host 203.0.113.7: ssh to 203.0.113.7 exited with status 127: bash: line 1: flexrun: command not found (flexrun is not on that host's PATH for non-interactive ssh: install it there, or use --prefix DIR"
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}

// TestMapByPPRNUMA: --map-by ppr:1:numa on a topology file with two NUMA
// nodes (cpu 0 and cpu 1) starts two ranks, one bound to each node, and
// --report-bindings says the same as each rank's Cpus_allowed_list.
func TestMapByPPRNUMA(t *testing.T) {
	f, env := twoNUMA(t)
	got, stderr := rankCPUs(t, env, "--map-by", "ppr:1:numa", "--report-bindings")
	want := map[int][]int{0: {0}, 1: {1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Cpus_allowed_list by rank %v, want %v", got, want)
	}
	rep := reported(t, stderr)
	for r, cpus := range want {
		if rep[r] != launcher.FormatCPUList(cpus) {
			t.Errorf("rank %d: reported %q, want %v", r, rep[r], cpus)
		}
	}
	if !strings.Contains(stderr, "rank 1 (local 1) bound to cpus 1 (numa node 1)") {
		t.Errorf("stderr %q", stderr)
	}
	// -x FLEXLINK_TOPO_FILE counts too: the plan reads the ranks' environment.
	if x := flexrun(t, runOpts{env: []string{"CUDA_VISIBLE_DEVICES="}}, "-x", "FLEXLINK_TOPO_FILE="+f, "--map-by", "ppr:1:numa", "--dry-run", "true"); !strings.Contains(x.stdout, "dry run: 2 ranks") {
		t.Errorf("-x FLEXLINK_TOPO_FILE: exit %d\n%s%s", x.code, x.stdout, x.stderr)
	}
	r := flexrun(t, runOpts{env: env}, "--map-by", "ppr:2:numa", "--oversubscribe", "--dry-run", "true")
	if !strings.Contains(r.stdout, "dry run: 4 ranks") || !regexp.MustCompile(`(?m)^3\s+\S+\s+0\s+3\s+4\s+-\s+numa node #1$`).MatchString(r.stdout) {
		t.Errorf("dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
