package clustertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// sbatchRecipe submits scripts/flexrun.sbatch as the README shows it, on
// two nodes with two tasks each, waits for the job to end (sbatch --wait
// exits with the job's status) and returns its output file.
func sbatchRecipe(t *testing.T, s *slurm, env []string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "job.out")
	argv := append([]string{"sbatch", "--wait", "-N", "2", "--ntasks-per-node", "2", "-o", out,
		filepath.Join(st.bins.repo, "scripts", "flexrun.sbatch")}, args...)
	p := run(t, append(s.env(), append(env, "FLEXRUN="+st.bins.flexrun)...), argv...)
	select {
	case <-p.done:
	case <-time.After(240 * time.Second):
		b, _ := os.ReadFile(out)
		t.Fatalf("%q still running after 240 s (flexrun's --timeout should have ended it)\njob output so far:\n%s", argv, b)
	}
	b, _ := os.ReadFile(out)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("sbatch --wait: exit %d\nstderr:\n%s\njob output:\n%s", code, p.err.String(), b)
	}
	return string(b)
}

// TestSbatchRecipeGo: the sbatch recipe runs a Go training program on two
// nodes: four ranks that agree with single-process training.
func TestSbatchRecipeGo(t *testing.T) {
	s := testSlurm(t)
	text := sbatchRecipe(t, s, nil, "--timeout", "2m", st.bins.train, "-epochs", "2")
	for _, want := range []string{"flexrun.sbatch: job ", ": 4 ranks", "weights identical on all 4 ranks", "matches single-process training"} {
		if !strings.Contains(text, want) {
			t.Errorf("job output lacks %q:\n%s", want, text)
		}
	}
}

// TestSbatchRecipeTorch: the same recipe runs examples/torch_train.py
// (PyTorch DDP, gloo on CPUs) on two nodes: the script checks the weights
// against single-process training and counts the hosts its ranks ran on.
func TestSbatchRecipeTorch(t *testing.T) {
	python := torchPython(t)
	s := testSlurm(t)
	text := sbatchRecipe(t, s, []string{"OMP_NUM_THREADS=1"}, "--timeout", "3m", python, filepath.Join(st.bins.repo, "examples", "torch_train.py"), "--steps", "3")
	if want := "torch_train: ok, 4 ranks on 2 hosts (gloo)"; !strings.Contains(text, want) {
		t.Errorf("job output lacks %q:\n%s", want, text)
	}
}

// torchPython is a python3 that imports torch (Debian's python3-torch is
// /usr/bin/python3's), or skips.
func torchPython(t *testing.T) string {
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import torch.distributed").Run() == nil {
			return path
		}
	}
	testenv.Missing(t, "PyTorch", "no python3 imports torch (apt-get install python3-torch)")
	return ""
}
