package main

// flexbench read by a parser written for nccl-tests' output, and
// nccl-tests' flags.

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// ncclLog is what a script that reads nccl-tests logs takes from one:
// the "# nThread" header, the data rows and the two summary lines.
type ncclLog struct {
	header map[string]string // nThread, nGpus, minBytes, maxBytes, step, warmup iters, iters, agg iters, validation, graph
	rows   [][]string        // size count type redop root time algbw busbw #wrong time algbw busbw #wrong
	oob    int
	oobOK  string
	avgBus string
}

// parseNCCLTests parses nccl-tests' documented output: comment lines start
// with '#'; the first is "# nThread N nGpus N minBytes N maxBytes N step:
// S warmup iters: N iters: N agg iters: N validation: N graph: N"; data
// rows are 13 blank-separated fields; the log ends with "# Out of bounds
// values : N OK|FAILED" and "# Avg bus bandwidth    : X".
func parseNCCLTests(out string) (ncclLog, error) {
	head := regexp.MustCompile(`^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\S+) warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)\s*$`)
	oob := regexp.MustCompile(`^# Out of bounds values : (\d+) (OK|FAILED)\s*$`)
	avg := regexp.MustCompile(`^# Avg bus bandwidth    : (\S+)\s*$`)
	keys := []string{"nThread", "nGpus", "minBytes", "maxBytes", "step", "warmup iters", "iters", "agg iters", "validation", "graph"}
	var l ncclLog
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := head.FindStringSubmatch(line); m != nil {
			l.header = map[string]string{}
			for i, k := range keys {
				l.header[k] = m[i+1]
			}
			continue
		}
		if m := oob.FindStringSubmatch(line); m != nil {
			l.oob, _ = strconv.Atoi(m[1])
			l.oobOK = m[2]
			continue
		}
		if m := avg.FindStringSubmatch(line); m != nil {
			l.avgBus = m[1]
			continue
		}
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 13 {
			return l, fmt.Errorf("data row with %d fields: %q", len(f), line)
		}
		l.rows = append(l.rows, f)
	}
	if l.header == nil || l.oobOK == "" || l.avgBus == "" {
		return l, fmt.Errorf("missing header or summary lines in:\n%s", out)
	}
	return l, nil
}

func TestNCCLTestsParserReadsFlexbench(t *testing.T) {
	out := flexrunBench(t, 2, "allreduce", "-b", "1K", "-e", "16K", "-f", "2", "-n", "2", "-w", "1",
		"-g", "1", "-t", "1", "-a", "1", "-m", "2", "-G", "0", "-z", "1", "-p", "0", "-T", "60")
	if out.code != 0 {
		t.Fatalf("exit %d: %s", out.code, out.stderr)
	}
	l, err := parseNCCLTests(out.stdout)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nThread": "1", "nGpus": "1", "minBytes": "1024", "maxBytes": "16384", "step": "2(factor)",
		"warmup iters": "1", "iters": "2", "agg iters": "2", "validation": "1", "graph": "0"}
	for k, v := range want {
		if l.header[k] != v {
			t.Errorf("header %s = %q, want %q", k, l.header[k], v)
		}
	}
	if len(l.rows) != 5 || l.oob != 0 || l.oobOK != "OK" {
		t.Fatalf("%d rows, out of bounds %d %s:\n%s", len(l.rows), l.oob, l.oobOK, out.stdout)
	}
	sum := 0.0
	for i, r := range l.rows {
		if size := strconv.Itoa(1024 << i); r[0] != size || r[2] != "float" || r[3] != "sum" || r[8] != "0" || r[12] != "0" {
			t.Errorf("row %d: %q", i, r)
		}
		bus, err := strconv.ParseFloat(r[7], 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += bus
	}
	// nccl-tests prints the mean out-of-place busbw with C's %g: at most
	// six significant digits.
	avg, err := strconv.ParseFloat(l.avgBus, 64)
	if err != nil {
		t.Fatal(err)
	}
	if digits := strings.TrimLeft(strings.NewReplacer(".", "", "-", "").Replace(strings.SplitN(l.avgBus, "e", 2)[0]), "0"); len(digits) > 6 {
		t.Errorf("avg bus bandwidth %q: more than 6 significant digits", l.avgBus)
	}
	// The rows are rounded to 0.01, the mean is not.
	if mean := sum / float64(len(l.rows)); math.Abs(avg-mean) > 0.01+1e-5*mean {
		t.Errorf("avg bus bandwidth %v, mean of the busbw column %v", avg, mean)
	}
}

func TestNCCLTestsFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-g", "2"}, "-g 2: flexbench drives one GPU per process; start 2 times as many ranks (flexrun -np) instead"},
		{[]string{"-t", "4"}, "-t 4: flexbench runs one thread per process"},
		{[]string{"-G", "1"}, "-G 1: flexbench does not capture CUDA graphs"},
		{[]string{"-a", "4"}, "-a 4: want 0 (rank 0), 1 (mean), 2 (min) or 3 (max)"},
		{[]string{"-m", "0"}, "-m 0: want 1 or more operations per iteration"},
		{[]string{"-z", "2"}, "-z 2: want 0 or 1"},
		{[]string{"-p", "3"}, "-p 3: want 0 or 1"},
		{[]string{"-T", "-1"}, "-T -1: want seconds"},
		{[]string{"-R", "1"}, "flag provided but not defined: -R (see flexbench allreduce --help)"},
		{[]string{"--device", "gpu", "-m", "2"}, "-a 3 -m 2: --device gpu reports the slowest rank's time of single operations"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			const ranks = 2
			out := flexrunBench(t, ranks, append([]string{"allreduce", "-b", "1K", "-e", "1K"}, tc.args...)...)
			if out.code == 0 {
				t.Fatalf("exit 0; stdout:\n%s", out.stdout)
			}
			// One line, from rank 0, and no usage.
			if n := strings.Count(out.stderr, tc.want); n != 1 || strings.Contains(out.stderr, "USAGE") || strings.Contains(out.stdout, "USAGE") {
				t.Errorf("%q %d times (want once, no usage); stderr:\n%s", tc.want, n, out.stderr)
			}
		})
	}
}

// TestNCCLTestsAverageModes: every -a mode gives a table a parser reads.
func TestNCCLTestsAverageModes(t *testing.T) {
	for _, a := range []string{"0", "2", "3"} {
		out := flexrunBench(t, 2, "allgather", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "-a", a)
		if out.code != 0 {
			t.Fatalf("-a %s: exit %d: %s", a, out.code, out.stderr)
		}
		if l, err := parseNCCLTests(out.stdout); err != nil || len(l.rows) != 1 {
			t.Errorf("-a %s: %v, %d rows", a, err, len(l.rows))
		}
	}
}

func TestPlotTitleNamesBackendOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.svg")
	out := flexrunBench(t, 2, "allreduce", "-b", "1K", "-e", "4K", "-n", "1", "-w", "0", "--plot", path)
	if out.code != 0 {
		t.Fatalf("exit %d: %s", out.code, out.stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, "flexlink allreduce, 2 ranks") || strings.Contains(s, "flexlink flexlink") {
		t.Errorf("plot title: %q in svg: %v, doubled: %v", "flexlink allreduce, 2 ranks", strings.Contains(s, "flexlink allreduce, 2 ranks"), strings.Contains(s, "flexlink flexlink"))
	}
}

// TestHelpOnce: --help under flexrun prints the usage once, from rank 0.
func TestHelpOnce(t *testing.T) {
	out := flexrunBench(t, 2, "allreduce", "--help")
	if n := strings.Count(out.stdout, "USAGE:"); out.code != 0 || n != 1 {
		t.Errorf("exit %d, usage printed %d times:\n%s", out.code, n, out.stdout)
	}
}
