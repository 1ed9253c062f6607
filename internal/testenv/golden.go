package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden compares got with the golden file at path, failing the test on
// a difference (showing the first line that differs), or with update (the
// test package's -update flag) writes got there instead, creating the
// directory.
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("differs from %s (go test -update rewrites it; review the diff)\n%s", path, FirstDiff(string(want), string(got)))
	}
}

// FirstDiff shows the first line where two texts differ.
func FirstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n want %q\n got  %q", i+1, wl, gl)
		}
	}
	return "(no difference)"
}
