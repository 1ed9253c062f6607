package capi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

// TestSilentByDefault: as NCCL, the library prints nothing unless asked.
// A failed call (the library's logger) and a communicator's WARN line (its
// rank logger) reach the debug file only with NCCL_DEBUG=WARN or more, or
// FLEXLINK_DEBUG; with neither, or with an NCCL_DEBUG value NCCL does not
// know, the file stays empty. The failure is in ncclGetLastError either
// way.
func TestSilentByDefault(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		loud  bool
		trace bool // TRACE lines too
	}{
		{name: "nothing set", env: nil},
		{name: "NCCL_DEBUG unknown", env: map[string]string{"NCCL_DEBUG": "LOUD"}},
		{name: "FLEXLINK_DEBUG empty", env: map[string]string{"FLEXLINK_DEBUG": ""}},
		{name: "NCCL_DEBUG=WARN", env: map[string]string{"NCCL_DEBUG": "WARN"}, loud: true},
		{name: "NCCL_DEBUG=VERSION", env: map[string]string{"NCCL_DEBUG": "VERSION"}, loud: true},
		{name: "NCCL_DEBUG=INFO", env: map[string]string{"NCCL_DEBUG": "INFO"}, loud: true},
		{name: "NCCL_DEBUG=TRACE", env: map[string]string{"NCCL_DEBUG": "TRACE"}, loud: true, trace: true},
		{name: "FLEXLINK_DEBUG=WARN", env: map[string]string{"FLEXLINK_DEBUG": "WARN"}, loud: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vars := map[string]string{"NCCL_DEBUG_FILE": filepath.Join(dir, "log.%h.%r"), "FLEXLINK_HOSTNAME": "hx"}
			for k, v := range tc.env {
				vars[k] = v
			}
			env := settings.Map(vars)
			l := New(Options{Env: env})
			err := l.Coll(1, 0xdead, Call{Kind: AllReduce, Count: 1, Type: ncclFloat32})
			if r := l.Report(err); r != InvalidArgument {
				t.Fatalf("a call on a bogus handle: %v (%v), want ncclInvalidArgument", r, err)
			}
			if last := l.LastError(0); !strings.Contains(last, "0xdead") {
				t.Errorf("ncclGetLastError %q does not name the handle", last)
			}
			l.GroupStart(1) // a TRACE line
			if err := l.GroupEnd(1); err != nil {
				t.Fatal(err)
			}
			lg := commLogger(nil, l.env, "hx", 3)
			lg.Warn("a communicator's warning")

			lib := readLog(t, filepath.Join(dir, "log.hx.-1"))
			rank := readLog(t, filepath.Join(dir, "log.hx.3"))
			if got := strings.Contains(lib, "[WARN]") && strings.Contains(lib, "0xdead"); got != tc.loud {
				t.Errorf("the failed call's WARN line logged: %v, want %v; the library's log:\n%s", got, tc.loud, lib)
			}
			if got := strings.Contains(rank, "[WARN]") && strings.Contains(rank, "a communicator's warning"); got != tc.loud {
				t.Errorf("the communicator's WARN line logged: %v, want %v; its log:\n%s", got, tc.loud, rank)
			}
			if got := strings.Contains(lib, "ncclGroupStart"); got != tc.trace {
				t.Errorf("the group's TRACE line logged: %v, want %v; the library's log:\n%s", got, tc.trace, lib)
			}
			if !tc.loud && (lib != "" || rank != "") {
				t.Errorf("silent by default, yet the logs hold:\n%s\n%s", lib, rank)
			}
			// ncclResetDebugInit keeps the level the environment says.
			l.ResetDebug()
			l.log.Warn("after reset")
			if got := strings.Contains(readLog(t, filepath.Join(dir, "log.hx.-1")), "after reset"); got != tc.loud {
				t.Errorf("after ncclResetDebugInit a WARN line logged: %v, want %v", got, tc.loud)
			}
		})
	}
}

// readLog is the file's text, "" when it does not exist.
func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
