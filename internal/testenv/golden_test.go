package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFirstDiff(t *testing.T) {
	for _, tc := range []struct{ want, got, diff string }{
		{"a\nb\n", "a\nb\n", "(no difference)"},
		{"a\nb\n", "a\nc\n", "line 2:\n want \"b\"\n got  \"c\""},
		{"a\n", "a\nextra\n", "line 2:\n want \"\"\n got  \"extra\""},
		{"x", "", "line 1:\n want \"x\"\n got  \"\""},
	} {
		if d := FirstDiff(tc.want, tc.got); d != tc.diff {
			t.Errorf("FirstDiff(%q, %q) = %q, want %q", tc.want, tc.got, d, tc.diff)
		}
	}
}

// TestGoldenUpdateThenCompare: -update writes the file (and its
// directory); the next run compares against what was written.
func TestGoldenUpdateThenCompare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "g.txt")
	Golden(t, path, []byte("one\ntwo\n"), true)
	if b, err := os.ReadFile(path); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("update wrote %q, %v", b, err)
	}
	Golden(t, path, []byte("one\ntwo\n"), false)
}
