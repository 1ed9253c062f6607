package listeners

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

// jobRanks is the size of the job the tests attack and inspect.
const jobRanks = 4

// jobSpec is how a test runs testdata/job.
type jobSpec struct {
	flags   []string // flexrun's, besides -np and --oversubscribe
	wait    string   // the job's -wait: how long its ranks wait for the release
	iters   int      // the job's checked rounds after the release
	timeout string   // flexrun --timeout
}

// runningJob is testdata/job's jobRanks ranks under flexrun, on two
// emulated hosts (tcp on loopback across them, shm within, PXN on), every
// rank ready (every listener open) and waiting for the release.
type runningJob struct {
	cmd     *exec.Cmd
	stderr  *testenv.SyncBuffer
	lines   chan string // stdout lines not yet read; closed at its end
	exited  chan error  // cmd.Wait's error, once stdout has ended
	out     []string    // stdout lines read so far
	owners  map[int]string
	release string // the file whose creation lets the ranks go on
}

// startJob builds flexrun and the job, starts it as spec says, and
// returns once every rank has run a checked allreduce and all-to-all
// (its pid is then in owners, beside flexrun's), or fails the test.
func startJob(ctx context.Context, t *testing.T, spec jobSpec) *runningJob {
	t.Helper()
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/flexlink/flexlink/cmd/flexrun",
		"github.com/flexlink/flexlink/tests/listeners/testdata/job").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	j := &runningJob{stderr: &testenv.SyncBuffer{}, lines: make(chan string, 64), exited: make(chan error, 1),
		release: filepath.Join(t.TempDir(), "go")}
	args := append([]string{"--oversubscribe", "-np", fmt.Sprint(jobRanks), "--timeout", spec.timeout}, spec.flags...)
	args = append(args, filepath.Join(bin, "job"), "-go", j.release, "-wait", spec.wait, "-iters", fmt.Sprint(spec.iters))
	j.cmd = exec.CommandContext(ctx, filepath.Join(bin, "flexrun"), args...)
	j.cmd.Env = append(os.Environ(), "FLEXLINK_PXN=0", "FLEXLINK_NET=tcp", "FLEXLINK_NET_IFNAME=lo", "FLEXLINK_DEBUG=WARN")
	j.cmd.Stderr = j.stderr
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			j.lines <- sc.Text()
		}
		close(j.lines)
		j.exited <- j.cmd.Wait()
	}()
	t.Cleanup(func() {
		if j.cmd.ProcessState == nil {
			_ = j.cmd.Process.Kill()
			for range j.lines {
			}
			<-j.exited
		}
	})
	j.owners = map[int]string{j.cmd.Process.Pid: "flexrun"}
	ready := regexp.MustCompile(`^ready rank (\d+) pid (\d+)$`)
	for len(j.owners) < jobRanks+1 {
		select {
		case l, ok := <-j.lines:
			if !ok {
				t.Fatalf("the job ended before every rank was ready:\n%s\n%s", strings.Join(j.out, "\n"), j.stderr.String())
			}
			j.out = append(j.out, l)
			if m := ready.FindStringSubmatch(l); m != nil {
				pid, _ := strconv.Atoi(m[2])
				j.owners[pid] = "rank " + m[1]
			}
		case <-ctx.Done():
			t.Fatalf("ranks not ready: %v\n%s", ctx.Err(), j.stderr.String())
		}
	}
	return j
}

// inventory is every listener of flexrun and the ranks, checked to hold
// every kind the job must have (checkInventory).
func (j *runningJob) inventory(t *testing.T) []listener {
	t.Helper()
	ls, err := listeners(j.owners)
	if err != nil {
		t.Fatal(err)
	}
	checkInventory(t, ls, j.owners)
	return ls
}

// finish lets the ranks go on and waits for the job's end: it must exit 0
// with #wrong 0 on every rank.
func (j *runningJob) finish(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(j.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for l := range j.lines {
		j.out = append(j.out, l)
	}
	if err := <-j.exited; err != nil {
		t.Fatalf("job: %v\n%s\n%s", err, strings.Join(j.out, "\n"), j.stderr.String())
	}
	wrong := regexp.MustCompile(`^#wrong (\d+) rank (\d+)$`)
	ranks := map[string]bool{}
	for _, l := range j.out {
		if m := wrong.FindStringSubmatch(l); m != nil {
			if m[1] != "0" {
				t.Errorf("rank %s: #wrong %s", m[2], m[1])
			}
			ranks[m[2]] = true
		}
	}
	if len(ranks) != jobRanks {
		t.Fatalf("%d ranks reported #wrong, want %d:\n%s", len(ranks), jobRanks, strings.Join(j.out, "\n"))
	}
}
