package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestStdoutWriteError: flexrun writing to a full disk (> /dev/full) says
// on stderr that output was lost and exits non-zero, as coreutils do; a
// failed job keeps its own status.
func TestStdoutWriteError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		code   int
	}{
		{"job succeeds", "echo hello", 1},
		{"job fails", `echo hello; [ "$FLEXLINK_RANK" = 1 ] && exit 3; exit 0`, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err) // Linux always has /dev/full
			}
			defer full.Close()
			cmd := exec.Command(bins.flexrun, "-np", "2", "--oversubscribe", "sh", "-c", tc.script)
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = full, &stderr
			_ = cmd.Run()
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", got, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), "flexrun: write error on stdout: ") || !strings.Contains(stderr.String(), "no space left on device") {
				t.Errorf("stderr does not report the lost output:\n%s", stderr.String())
			}
		})
	}
}
