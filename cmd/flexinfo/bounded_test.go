package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/bounded"
)

// TestEndlessTopologyFile: a topology file that never ends (/dev/zero,
// /dev/urandom), through --topo, --topo-file or FLEXLINK_TOPO_FILE, is one
// error line naming the file and the limit, not an out-of-memory death.
func TestEndlessTopologyFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		file string
	}{
		{"--topo /dev/zero", nil, []string{"--topo", "/dev/zero"}, "/dev/zero"},
		{"--topo /dev/urandom", nil, []string{"--topo", "/dev/urandom"}, "/dev/urandom"},
		{"FLEXLINK_TOPO_FILE=/dev/zero", map[string]string{"FLEXLINK_TOPO_FILE": "/dev/zero"}, nil, "/dev/zero"},
		{"routes --topo-file /dev/urandom", nil, []string{"routes", "--topo-file", "/dev/urandom", "--nodes", "2"}, "/dev/urandom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.env, tc.args...)
			if !errors.Is(err, bounded.ErrTooLarge) {
				t.Fatalf("error %v, want one wrapping bounded.ErrTooLarge", err)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, tc.file+": more than 16 MiB") {
				t.Errorf("error %q: want one line naming %s and the limit", msg, tc.file)
			}
		})
	}
}
