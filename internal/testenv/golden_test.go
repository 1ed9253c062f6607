package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFirstDiff: each case is want, got and the difference shown.
func TestFirstDiff(t *testing.T) {
	cases := [][3]string{
		{"a\nb\n", "a\nb\n", "(no difference)"},
		{"a\nb\n", "a\nc\n", "line 2:\n want \"b\"\n got  \"c\""},
		{"a\n", "a\nextra\n", "line 2:\n want \"\"\n got  \"extra\""},
		{"x", "", "line 1:\n want \"x\"\n got  \"\""},
	}
	for _, c := range cases {
		if d := FirstDiff(c[0], c[1]); d != c[2] {
			t.Errorf("FirstDiff(%q, %q) = %q, want %q", c[0], c[1], d, c[2])
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
