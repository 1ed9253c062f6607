package join

import (
	"context"
	"errors"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

// TestLauncherRank: a process is one of flexrun's ranks when flexrun's
// rank and bootstrap address are both in its environment.
func TestLauncherRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		rank int
		ok   bool
	}{
		{"flexrun's rank", map[string]string{"FLEXLINK_RANK": "3", "FLEXLINK_BOOTSTRAP": "h:1"}, 3, true},
		{"rank 0", map[string]string{"FLEXLINK_RANK": "0", "FLEXLINK_BOOTSTRAP": "h:1"}, 0, true},
		{"no bootstrap (mpirun, srun)", map[string]string{"FLEXLINK_RANK": "3"}, -1, false},
		{"no rank", map[string]string{"FLEXLINK_BOOTSTRAP": "h:1"}, -1, false},
		{"not a number", map[string]string{"FLEXLINK_RANK": "x", "FLEXLINK_BOOTSTRAP": "h:1"}, -1, false},
		{"nothing", nil, -1, false},
	} {
		r, ok := LauncherRank(settings.Map(tc.env))
		if r != tc.rank || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, r, ok, tc.rank, tc.ok)
		}
		if !tc.ok {
			if _, err := DialReporter(context.Background(), settings.Map(tc.env), nil); !errors.Is(err, ErrNoLauncher) {
				t.Errorf("%s: DialReporter: %v, want ErrNoLauncher", tc.name, err)
			}
		}
	}
}

// TestReporterHost: a reporter's host name says so, whatever the host is
// called, and a host is not taken for one by a look-alike name.
func TestReporterHost(t *testing.T) {
	for _, host := range []string{"vm", "node-7.cluster", ""} {
		if !IsReporterHost(ReporterHost(host)) {
			t.Errorf("ReporterHost(%q) = %q is not a reporter's", host, ReporterHost(host))
		}
	}
	for _, host := range []string{"vm", "libnccl-report", "x-libnccl-report@vm", ""} {
		if IsReporterHost(host) {
			t.Errorf("%q taken for a reporter's host", host)
		}
	}
}
