package capi

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

// TestCLibrarySilent builds libnccl.so.2 as make libnccl does and runs
// testdata/nccl_quiet.c against it: a refused call writes nothing to
// stderr with neither NCCL_DEBUG nor FLEXLINK_DEBUG set (or NCCL_DEBUG set
// to a word NCCL does not know), as NCCL; with NCCL_DEBUG=WARN (or
// FLEXLINK_DEBUG=WARN) it writes the WARN line naming the datatype. The
// program reads the reason from ncclGetLastError either way.
func TestCLibrarySilent(t *testing.T) {
	cc := testenv.LookPath(t, "C compiler", "cc")
	w := newCWorkshop(t)
	prog := w.program(cc, "nccl_quiet", w.libnccl())

	var base []string // the environment without any logging variable
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NCCL_DEBUG") && !strings.HasPrefix(kv, "FLEXLINK_DEBUG") {
			base = append(base, kv)
		}
	}
	for _, tc := range []struct {
		name string
		env  []string
		loud bool
	}{
		{"unset", nil, false},
		{"NCCL_DEBUG unknown", []string{"NCCL_DEBUG=LOUD"}, false},
		{"NCCL_DEBUG=WARN", []string{"NCCL_DEBUG=WARN"}, true},
		{"NCCL_DEBUG=INFO", []string{"NCCL_DEBUG=INFO"}, true},
		{"FLEXLINK_DEBUG=WARN", []string{"FLEXLINK_DEBUG=WARN"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(w.ctx, prog)
			cmd.Env = append(append([]string(nil), base...), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("nccl_quiet: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), "nccl_quiet: ok") || !strings.Contains(stdout.String(), "99") {
				t.Errorf("stdout does not hold the refusal naming datatype 99 and ok:\n%s", stdout.String())
			}
			warned := strings.Contains(stderr.String(), "WARN") && strings.Contains(stderr.String(), "99")
			if warned != tc.loud {
				t.Errorf("the refusal's WARN line on stderr: %v, want %v; stderr:\n%s", warned, tc.loud, stderr.String())
			}
			if !tc.loud && stderr.Len() > 0 {
				t.Errorf("silent by default, yet stderr holds:\n%s", stderr.String())
			}
		})
	}
}
