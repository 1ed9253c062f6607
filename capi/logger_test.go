package capi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

func TestNCCLDebugEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want map[string]string // FLEXLINK_DEBUG* as read; "-": unset
	}{
		{"nothing set", nil, map[string]string{"FLEXLINK_DEBUG": "-", "FLEXLINK_DEBUG_SUBSYS": "-", "FLEXLINK_DEBUG_FILE": "-"}},
		{"NCCL_DEBUG=INFO", map[string]string{"NCCL_DEBUG": "info"}, map[string]string{"FLEXLINK_DEBUG": "INFO"}},
		{"NCCL_DEBUG=TRACE", map[string]string{"NCCL_DEBUG": "TRACE"}, map[string]string{"FLEXLINK_DEBUG": "TRACE"}},
		{"NCCL_DEBUG=VERSION is WARN", map[string]string{"NCCL_DEBUG": "VERSION"}, map[string]string{"FLEXLINK_DEBUG": "WARN"}},
		{"unknown NCCL_DEBUG left out", map[string]string{"NCCL_DEBUG": "LOUD"}, map[string]string{"FLEXLINK_DEBUG": "-"}},
		{"FLEXLINK_DEBUG wins", map[string]string{"NCCL_DEBUG": "INFO", "FLEXLINK_DEBUG": "DEBUG"}, map[string]string{"FLEXLINK_DEBUG": "DEBUG"}},
		{"subsys: NCCL-only words dropped", map[string]string{"NCCL_DEBUG_SUBSYS": "INIT,TUNING,coll,PROXY"}, map[string]string{"FLEXLINK_DEBUG_SUBSYS": "INIT,COLL"}},
		{"subsys: negation kept", map[string]string{"NCCL_DEBUG_SUBSYS": "^COLL,ALLOC"}, map[string]string{"FLEXLINK_DEBUG_SUBSYS": "^COLL"}},
		{"subsys: nothing known", map[string]string{"NCCL_DEBUG_SUBSYS": "TUNING"}, map[string]string{"FLEXLINK_DEBUG_SUBSYS": "-"}},
		{"subsys: FLEXLINK wins", map[string]string{"NCCL_DEBUG_SUBSYS": "COLL", "FLEXLINK_DEBUG_SUBSYS": "NET"}, map[string]string{"FLEXLINK_DEBUG_SUBSYS": "NET"}},
		{"file", map[string]string{"NCCL_DEBUG_FILE": "/tmp/n.%h.%p"}, map[string]string{"FLEXLINK_DEBUG_FILE": "/tmp/n.%h.%p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := ncclDebugEnv(settings.Map(tc.env))
			for k, want := range tc.want {
				v, ok := env(k)
				if !ok {
					v = "-"
				}
				if v != want {
					t.Errorf("%s = %q, want %q", k, v, want)
				}
			}
			// What the mapping makes must pass the registry's checks.
			if err := settings.Validate(env); err != nil && !strings.Contains(tc.name, "wins") {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// TestNCCLDebugFileGetsLines: NCCL_DEBUG=INFO with NCCL_DEBUG_FILE sends
// the library's lines, through internal/flog (host= tag), to the file.
func TestNCCLDebugFileGetsLines(t *testing.T) {
	dir := t.TempDir()
	env := settings.Map(map[string]string{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": filepath.Join(dir, "nccl.%h"), "FLEXLINK_HOSTNAME": "hx"})
	l := New(Options{Env: env})
	l.log.Info("hello from the library")
	b, err := os.ReadFile(filepath.Join(dir, "nccl.hx"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, "[INFO]  flexlink: hello from the library: host=hx") {
		t.Errorf("file holds %q", s)
	}
}
