package comm

import (
	"strings"
	"testing"
)

// TestCommSummary: one INFO line per communicator at creation with its
// ranks, hosts and the links each kind of peer gets.
func TestCommSummary(t *testing.T) {
	hostOf := func(r int) string { return []string{"a", "a", "b", "b"}[r] }
	tests := []struct {
		name   string
		n      int
		hostOf func(int) string
		vars   map[string]string
		want   map[string]string // "-": key absent
	}{
		{"one host over shm", 3, func(int) string { return "h" }, map[string]string{"FLEXLINK_DEBUG": "INFO"},
			map[string]string{"comm": "w", "nranks": "3", "nhosts": "1", "hosts": "h:3", "local_ranks": "3", "transports": "shm",
				"same_host_peers": "2", "same_host_links": "shm", "other_host_peers": "-", "balanced": "-"}},
		{"two hosts over tcp", 4, hostOf, map[string]string{"FLEXLINK_DEBUG": "INFO", "FLEXLINK_TRANSPORT": "tcp"},
			map[string]string{"nranks": "4", "nhosts": "2", "hosts": "a:2,b:2", "local_ranks": "2", "transports": "tcp",
				"same_host_peers": "1", "same_host_links": "tcp", "other_host_peers": "2", "other_host_links": "tcp"}},
		{"off below INFO", 2, func(int) string { return "h" }, nil, nil},
		{"off without INIT", 2, func(int) string { return "h" }, map[string]string{"FLEXLINK_DEBUG": "INFO", "FLEXLINK_DEBUG_SUBSYS": "COLL"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := runLoggedHosts(t, tc.n, tc.vars, tc.hostOf, func(c *Comm) error { return nil })
			f := fields(logs[0], "communicator", 0)
			if tc.want == nil {
				if f != nil {
					t.Errorf("line written: %v\n%s", f, logs[0])
				}
				return
			}
			if f == nil {
				t.Fatalf("no communicator line in:\n%s", logs[0])
			}
			for k, want := range tc.want {
				got, ok := f[k]
				if !ok {
					got = "-"
				}
				got = strings.Trim(got, `"`) // hclog quotes values with a comma
				if got != want {
					t.Errorf("%s=%q, want %q\n%s", k, got, want, logs[0])
				}
			}
		})
	}
}
