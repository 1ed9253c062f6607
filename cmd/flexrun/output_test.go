package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// probeLine is line i of rank r in "envprobe lines".
func probeLine(r, i int) string {
	return fmt.Sprintf("rank %d line %d %s", r, i, strings.Repeat(itoa(r%10), 40))
}

// checkLines verifies that out holds exactly n intact lines of each of
// ranks ranks, in order per rank, each with prefix(rank) in front.
func checkLines(t *testing.T, what, out string, ranks, n int, prefix func(int) string) {
	t.Helper()
	next := make([]int, ranks)
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		s := line
		if i := strings.Index(s, ">:"); strings.HasPrefix(s, "[") && i > 0 {
			s = s[i+2:] // after mpirun's tag, "[1,R]<stdout>:"
		}
		var r int
		if _, err := fmt.Sscanf(s, "rank %d", &r); err != nil || r < 0 || r >= ranks {
			t.Fatalf("%s line %d: %q names no rank", what, i, line)
		}
		if want := prefix(r) + probeLine(r, next[r]); line != want {
			t.Fatalf("%s line %d: %q, want %q", what, i, line, want)
		}
		next[r]++
	}
	for r, k := range next {
		if k != n {
			t.Errorf("%s: rank %d has %d lines, want %d", what, r, k, n)
		}
	}
}

func TestWholeLines(t *testing.T) {
	const ranks, n = 4, 3000
	tests := []struct {
		name   string
		flags  []string
		prefix func(int) string // stdout's
		errPfx func(int) string // stderr's
	}{
		{"plain", nil, func(int) string { return "" }, func(int) string { return "" }},
		{"tag-output", []string{"--tag-output"}, func(r int) string { return "[1," + itoa(r) + "]<stdout>:" }, func(r int) string { return "[1," + itoa(r) + "]<stderr>:" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-np", itoa(ranks), "--oversubscribe"}, tc.flags...)
			r := flexrun(t, runOpts{}, append(args, bins.probe, "lines", itoa(n))...)
			if r.code != 0 {
				t.Fatalf("exit %d", r.code)
			}
			checkLines(t, "stdout", r.stdout, ranks, n, tc.prefix)
			checkLines(t, "stderr", r.stderr, ranks, n, tc.errPfx)
		})
	}
}

func TestOutputDir(t *testing.T) {
	const ranks, n = 3, 50
	dir := filepath.Join(t.TempDir(), "out")
	r := flexrun(t, runOpts{}, "-np", itoa(ranks), "--oversubscribe", "--tag-output", "--output-dir", dir, bins.probe, "lines", itoa(n))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for rank := range ranks {
		var want strings.Builder
		for i := range n {
			want.WriteString(probeLine(rank, i) + "\n")
		}
		for _, stream := range []string{"stdout", "stderr"} {
			b, err := os.ReadFile(filepath.Join(dir, "rank."+itoa(rank), stream))
			if err != nil {
				t.Fatal(err)
			}
			// The files hold the rank's bytes as written: untagged.
			if string(b) != want.String() {
				t.Errorf("rank.%d/%s: %d bytes, want %d untagged lines", rank, stream, len(b), n)
			}
		}
	}
}

func TestPartialAndLongLines(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   []int // line lengths, any rank order; both ranks print the same
	}{
		{"final line without newline", `printf partial`, []int{7, 7}},
		{"empty lines kept", `printf 'a\n\nb\n'`, []int{1, 0, 1, 1, 0, 1}},
		// 2.5 MiB without a newline: forwarded as 1 MiB, 1 MiB, 0.5 MiB lines.
		{"long line split at 1 MiB", `head -c 2621440 /dev/zero | tr '\0' a`, []int{1 << 20, 1 << 20, 1 << 19, 1 << 20, 1 << 20, 1 << 19}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := flexrun(t, runOpts{}, "-np", "2", "--oversubscribe", "sh", "-c", tc.script)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if !strings.HasSuffix(r.stdout, "\n") {
				t.Fatalf("output does not end with a newline")
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			count := map[int]int{}
			for _, l := range lines {
				count[len(l)]++
			}
			want := map[int]int{}
			for _, n := range tc.want {
				want[n]++
			}
			if fmt.Sprint(count) != fmt.Sprint(want) {
				t.Errorf("line lengths %v, want %v", count, want)
			}
		})
	}
}

func TestStdinGoesToRankZero(t *testing.T) {
	r := flexrun(t, runOpts{stdin: "hello\nworld, with commas\n"}, "-np", "3", "--oversubscribe", bins.probe, "stdin")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		`rank 0 stdin "hello\nworld, with commas\n"`,
		`rank 1 stdin ""`,
		`rank 2 stdin ""`,
	} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("output lacks %s:\n%s", want, r.stdout)
		}
	}
}
