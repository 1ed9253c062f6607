package main

import (
	"strings"
	"testing"
)

// TestKeepGoing: with --keep-going a rank that fails ends nothing: the
// others finish their work, flexrun names the failed rank and exits with
// its status; without it the others are terminated.
func TestKeepGoing(t *testing.T) {
	script := `if [ "$FLEXLINK_RANK" = 1 ]; then exit 3; fi; sleep 3; echo survived $FLEXLINK_RANK`
	for _, tc := range []struct {
		name      string
		args      []string
		survivors int
	}{
		{"keep-going", []string{"--keep-going"}, 2},
		{"default", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-np", "3", "--oversubscribe"}, tc.args...)
			r := flexrun(t, runOpts{}, append(args, "sh", "-c", script)...)
			if r.code != 3 {
				t.Errorf("exit status %d, want 3 (rank 1's); stderr:\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, "rank 1 (host") {
				t.Errorf("stderr does not name rank 1:\n%s", r.stderr)
			}
			if got := strings.Count(r.stdout, "survived"); got != tc.survivors {
				t.Errorf("%d ranks finished their work, want %d; stdout:\n%s\nstderr:\n%s", got, tc.survivors, r.stdout, r.stderr)
			}
			if tc.survivors > 0 && !strings.Contains(r.stderr, "--keep-going") {
				t.Errorf("stderr does not say the others go on:\n%s", r.stderr)
			}
		})
	}
}
