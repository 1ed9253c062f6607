package launcher

import (
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

func TestSlurmHosts(t *testing.T) {
	tests := []struct {
		name, nodes, tpn string
		want             []Host
		wantErr          string
	}{
		{"counts per node", "node[01-03]", "2(x2),1",
			[]Host{{Name: "node01", Slots: 2}, {Name: "node02", Slots: 2}, {Name: "node03", Slots: 1}}, ""},
		{"node without tasks left out", "a,b", "0,4", []Host{{Name: "b", Slots: 4}}, ""},
		{"count mismatch", "a,b", "1", nil, "gives 1 counts for the 2 nodes"},
		{"no tasks", "a", "0", nil, "no tasks"},
		{"bad list", "a[", "1", nil, "unclosed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SlurmHosts(tc.nodes, tc.tpn)
			testenv.WantResult(t, got, err, tc.want, tc.wantErr)
		})
	}
}
