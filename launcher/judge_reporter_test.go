package launcher

import (
	"testing"

	"github.com/flexlink/flexlink/internal/comm/join"
)

// TestReporterIsNoJoin: a process that joins the job's store only to
// publish why its communicators ended (flexlink's libnccl in a PyTorch
// rank, join.DialReporter) is heard through those ends alone: its join,
// goodbye, loss or refusal is not evidence of how the program used the
// store. Anyone else's report is.
func TestReporterIsNoJoin(t *testing.T) {
	reporter := join.ReporterHost("h1")
	for _, tc := range []struct {
		name string
		r    BootstrapReport
		want bool
	}{
		{"reporter joined", BootstrapReport{Kind: ReportJoined, Rank: 1, Host: reporter}, false},
		{"reporter left", BootstrapReport{Kind: ReportLeft, Rank: 1, Host: reporter}, false},
		{"reporter lost", BootstrapReport{Kind: ReportLost, Rank: 1, Host: reporter, Text: "connection closed before goodbye"}, false},
		{"reporter refused", BootstrapReport{Kind: ReportRefused, Rank: 1, Host: reporter, Text: "rank 1 already joined"}, false},
		{"reporter's end", BootstrapReport{Kind: ReportEnd, Rank: 1, Host: reporter, End: &CommEnd{Comm: "nccl@h0:1/w", Kind: "timeout", ClosedBy: -1}}, true},
		{"rank joined", BootstrapReport{Kind: ReportJoined, Rank: 1, Host: "h1"}, true},
		{"rank lost", BootstrapReport{Kind: ReportLost, Rank: 1, Host: "h1"}, true},
		{"rank left", BootstrapReport{Kind: ReportLeft, Rank: 1, Host: "h1"}, true},
		{"rank's end", BootstrapReport{Kind: ReportEnd, Rank: 1, Host: "h1", End: &CommEnd{Comm: "w", Kind: "timeout", ClosedBy: -1}}, true},
		{"host named like a reporter's, not one", BootstrapReport{Kind: ReportJoined, Rank: 1, Host: "h1-libnccl-report@x"}, true},
	} {
		if got := isEvidence(tc.r); got != tc.want {
			t.Errorf("%s: isEvidence = %v, want %v", tc.name, got, tc.want)
		}
	}
}
