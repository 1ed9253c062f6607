package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RunWithBinaries is a TestMain that builds the main packages pkgs (import
// paths or directories) into a new temporary directory named after
// prefix, hands its path to ready, runs the tests and removes the
// directory. It exits with m's code, or 1 where the directory or the build
// fails.
func RunWithBinaries(m *testing.M, prefix string, ready func(dir string), pkgs ...string) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ready(dir)
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "go build %s: %v\n", strings.Join(pkgs, " "), err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
