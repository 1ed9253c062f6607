// Package examples holds the example programs; this test runs them the way a
// user does, under flexrun, as real processes.
package examples

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

var bin string

func TestMain(m *testing.M) {
	testenv.RunWithBinaries(m, "flexlink-examples", func(dir string) { bin = dir },
		"github.com/flexlink/flexlink/cmd/flexrun", "github.com/flexlink/flexlink/examples/hello", "github.com/flexlink/flexlink/examples/train", "github.com/flexlink/flexlink/examples/modelparallel")
}

func flexrun(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "flexrun"), append([]string{"--timeout", "60s", "--oversubscribe"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("flexrun %v: %v\n%s", args, err, out)
	}
	return string(out)
}

var helloLine = regexp.MustCompile(`^hello from rank (\d+) of (\d+) on (\S+) \(local rank (\d+) of (\d+)\)$`)

func TestHelloEveryWorldSize(t *testing.T) {
	host, _ := os.Hostname()
	for n := 1; n <= 16; n++ {
		out := flexrun(t, "-np", fmt.Sprint(n), filepath.Join(bin, "hello"))
		var ranks []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			m := helloLine.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("n=%d: unexpected line %q in\n%s", n, line, out)
			}
			if m[2] != fmt.Sprint(n) || m[5] != fmt.Sprint(n) || m[1] != m[4] || m[3] != host {
				t.Errorf("n=%d: wrong identity in %q", n, line)
			}
			ranks = append(ranks, m[1])
		}
		sort.Slice(ranks, func(i, j int) bool {
			return len(ranks[i]) < len(ranks[j]) || len(ranks[i]) == len(ranks[j]) && ranks[i] < ranks[j]
		})
		for i, r := range ranks {
			if r != fmt.Sprint(i) {
				t.Fatalf("n=%d: ranks %v, want 0..%d once each", n, ranks, n-1)
			}
		}
	}
}

// The training example checks itself (identical weights on every rank, equal
// to single-process training); here it must say so and exit 0, for several
// world sizes and both host transports.
func TestTrainMatchesSingleProcess(t *testing.T) {
	for _, c := range []struct {
		n         int
		transport string
	}{{1, "auto"}, {2, "shm"}, {3, "tcp"}, {4, "auto"}} {
		out := flexrun(t, "-np", fmt.Sprint(c.n), "-x", "FLEXLINK_TRANSPORT="+c.transport, filepath.Join(bin, "train"), "-epochs", "3")
		for _, want := range []string{fmt.Sprintf("weights identical on all %d ranks", c.n), "matches single-process training", "epoch  3"} {
			if !strings.Contains(out, want) {
				t.Errorf("n=%d %s: output lacks %q:\n%s", c.n, c.transport, want, out)
			}
		}
	}
}

func TestModelParallelGroups(t *testing.T) {
	out := flexrun(t, "-np", "8", filepath.Join(bin, "modelparallel"), "-count", "4096")
	if got := strings.Count(out, "sums correct"); got != 8 {
		t.Fatalf("%d of 8 ranks report correct sums:\n%s", got, out)
	}
	if !strings.Contains(out, "rank 5: tp group [4 5 6 7] (rank 1 of 4), dp group [1 5] (rank 1 of 2)") {
		t.Errorf("rank 5's groups are wrong:\n%s", out)
	}
}

// Without a launcher, Init gives a world of one rank (like MPI's singleton
// init) and the program runs as a plain process.
func TestHelloWithoutLauncher(t *testing.T) {
	cmd := exec.Command(filepath.Join(bin, "hello"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEXLINK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hello alone: %v\n%s", err, out)
	}
	if m := helloLine.FindStringSubmatch(strings.TrimSpace(string(out))); m == nil || m[1] != "0" || m[2] != "1" {
		t.Fatalf("hello alone printed %q, want rank 0 of 1", out)
	}
}
