package comm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// TestRailSelection: two ranks on two hosts with two NICs each (lo and
// the first other NIC, "eth0", different subnets) pair the NICs they share: every NIC by default
// (with FLEXLINK_NET_RAILS=0), the pinned one with FLEXLINK_NET_DEVICES,
// the own one under FLEXLINK_PXN (local rank 0: the first), and their
// first NICs across subnets when pinned to different ones.
func TestRailSelection(t *testing.T) {
	eth0 := testenv.SecondNIC(t)
	base := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + eth0, "FLEXLINK_NET_RAILS": "0"}
	for _, c := range []struct {
		name string
		env  [2]map[string]string
		want [2][]string // per rank: the devices in its links' descriptions
	}{
		{"every NIC", [2]map[string]string{{}, {}}, [2][]string{{"lo", "eth0"}, {"lo", "eth0"}}},
		{"pinned both", [2]map[string]string{{"FLEXLINK_NET_DEVICES": "eth0"}, {"FLEXLINK_NET_DEVICES": "eth0"}}, [2][]string{{"eth0"}, {"eth0"}}},
		{"pinned one side", [2]map[string]string{{"FLEXLINK_NET_DEVICES": "eth0"}, {}}, [2][]string{{"eth0"}, {"eth0"}}},
		{"own under PXN", [2]map[string]string{{"FLEXLINK_PXN": "0"}, {"FLEXLINK_PXN": "0"}}, [2][]string{{"lo"}, {"lo"}}},
		{"across subnets", [2]map[string]string{{"FLEXLINK_NET_DEVICES": "lo"}, {"FLEXLINK_NET_DEVICES": "eth0"}}, [2][]string{{"lo"}, {"eth0"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			descs := runRanksEnv(t, base, c.env)
			for r, want := range c.want {
				for _, d := range want {
					if !strings.Contains(descs[r], " "+d+" ") {
						t.Errorf("rank %d: links %q, want one on %s", r, descs[r], d)
					}
				}
				if n := strings.Count(descs[r], "net tcp "); n != len(want) {
					t.Errorf("rank %d: %d network links (%q), want %d", r, n, descs[r], len(want))
				}
			}
		})
	}
}

// runRanksEnv runs one allreduce on two ranks on hosts host0 and host1,
// each with base and its own variables, and returns each rank's link
// descriptions.
func runRanksEnv(t *testing.T, base map[string]string, per [2]map[string]string) [2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out [2]string
	errs := worldtest.Run(t, worldtest.Spec{N: 2, Env: base, RankEnv: func(r int) map[string]string { return per[r] }, Host: worldtest.OwnHost}, New, func(c *Comm) error {
		if err := allreduces(ctx, c, []int{1 << 16}); err != nil {
			return err
		}
		for _, l := range c.Links() {
			out[c.Rank()] += l.Desc + "; "
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}
