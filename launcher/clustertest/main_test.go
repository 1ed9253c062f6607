package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// binaries are built once by TestMain; fixtures are started by the first
// test that needs them and stopped by TestMain.
type binaries struct {
	dir      string // PREFIX: flexrun is dir/bin/flexrun (flexrun --prefix dir)
	flexrun  string
	train    string // examples/train
	spin     string // testdata/spin
	trainMPI string // examples/train built with -tags mpi ("" when that failed)
	mpiErr   string // why trainMPI is missing
	repo     string // repository root
}

// state is set up by TestMain before any test runs; the fixtures in it
// start lazily, each once.
type state struct {
	bins    binaries
	cluster fixture[*cluster]
	slurm   fixture[*slurm]
}

var st state

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flexlink-clustertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755) // the namespaces' sshd sessions run these binaries
	repo, _ := filepath.Abs("../..")
	b := binaries{dir: dir, repo: repo, flexrun: filepath.Join(dir, "bin", "flexrun"), train: filepath.Join(dir, "bin", "train"),
		spin: filepath.Join(dir, "bin", "spin"), trainMPI: filepath.Join(dir, "bin", "train-mpi")}
	builds := []struct {
		out, pkg string
		tags     []string
	}{
		{b.flexrun, "./cmd/flexrun", nil}, {b.train, "./examples/train", nil},
		{b.spin, "./launcher/clustertest/testdata/spin", nil}, {b.trainMPI, "./examples/train", []string{"-tags", "mpi"}},
	}
	for _, bl := range builds {
		args := append([]string{"build"}, bl.tags...)
		cmd := exec.Command("go", append(args, "-o", bl.out, bl.pkg)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil && bl.tags != nil {
			b.trainMPI, b.mpiErr = "", fmt.Sprintf("go build -tags mpi ./examples/train: %v: %s", err, out)
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", bl.pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	st.bins = b
	code := m.Run()
	st.cluster.stop()
	st.slurm.stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture is something a group of tests shares: started by the first test
// that asks, stopped at the end. A failed start is remembered, so each
// later test reports it too.
type fixture[T any] struct {
	once  sync.Once
	val   T
	skip  string // missing system component: "component: why"
	err   error
	close func()
}

func (f *fixture[T]) get(t *testing.T, start func() (T, func(), string, error)) T {
	t.Helper()
	f.once.Do(func() { f.val, f.close, f.skip, f.err = start() })
	if f.skip != "" {
		component, why, _ := strings.Cut(f.skip, ": ")
		missing(t, component, why)
	}
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.val
}

func (f *fixture[T]) stop() {
	if f.close != nil {
		f.close()
	}
}

// proc is a running process whose output the test reads as it comes.
type proc struct {
	cmd      *exec.Cmd
	out, err testenv.SyncBuffer
	done     chan struct{}
	start    time.Time
	end      time.Time
}

// run starts argv with env added to the test's environment. The process
// is killed when the test ends.
func run(t *testing.T, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	go func() {
		p.cmd.Wait()
		p.end = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

// wait waits at most d for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%q still running after %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, d, p.out.String(), p.err.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitLines waits at most d until stdout holds n lines matching re.
func (p *proc) waitLines(t *testing.T, re *regexp.Regexp, n int, d time.Duration) [][]string {
	t.Helper()
	var got [][]string
	ok := poll(d, func() bool {
		got = re.FindAllStringSubmatch(p.out.String(), -1)
		return len(got) >= n
	})
	if !ok {
		t.Fatalf("%d lines matching %q within %v, want %d\nstdout:\n%s\nstderr:\n%s", len(got), re, d, n, p.out.String(), p.err.String())
	}
	return got
}

// poll calls cond every 50 ms until it holds or d has passed (for
// external processes only).
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// command runs a helper command to completion (30 s at most).
func command(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}
