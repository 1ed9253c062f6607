package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// CSharedLib compiles the C source src into a shared library in a
// temporary folder of t and returns its path; without a C compiler it
// skips or fails through Missing.
func CSharedLib(t testing.TB, src string) string {
	t.Helper()
	cc := LookPath(t, "C compiler", "cc")
	dir := t.TempDir()
	c, so := filepath.Join(dir, "lib.c"), filepath.Join(dir, "lib.so")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, c).CombinedOutput(); err != nil {
		t.Fatalf("compiling a C library: %v\n%s", err, out)
	}
	return so
}
