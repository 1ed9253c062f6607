package netlink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// TestRailsDefaults: two emulated hosts with two NICs (rails) each, both
// limited to 1 Gbit/s, 2 ranks per host, and no network setting at all:
// FLEXLINK_NET_RAILS defaults to every NIC, so allreduce and all-to-all
// of 16 MiB move bytes on both rails of both hosts (per-NIC counters,
// /sys/class/net/rail<r>/statistics/tx_bytes in each host's namespace),
// and the results are exact (flexbench's check, #wrong 0).
func TestRailsDefaults(t *testing.T) {
	const name, subnet = "ndflt", "10.86"
	prefix, bin, tc := railsUp(t, name, subnet, "--rate", "1gbit")
	hosts, sshConfig := tc.Hosts, tc.SSHConfig
	for _, op := range []string{"allreduce", "alltoall"} {
		t.Run(op, func(t *testing.T) {
			before := testenv.RailTxBytes(t, name)
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "flexrun"), "--ssh-args", "-F "+sshConfig, "--prefix", prefix,
				"-H", hosts[0]+":2,"+hosts[1]+":2",
				filepath.Join(bin, "flexbench"), op, "-b", "16M", "-e", "16M", "-n", "3", "-w", "1", "--no-inplace", "--json")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("flexrun %s: %v (ctx %v)\nstdout:\n%s\nstderr:\n%s", op, err, ctx.Err(), stdout.String(), stderr.String())
			}
			var rows []struct {
				Size  int     `json:"size"`
				Wrong int     `json:"out_wrong"`
				BusBW float64 `json:"out_busbw_gbs"`
			}
			if err := json.Unmarshal([]byte(stdout.String()), &rows); err != nil || len(rows) != 1 {
				t.Fatalf("flexbench output %q: %v", stdout.String(), err)
			}
			if rows[0].Wrong != 0 {
				t.Errorf("%s 16 MiB: #wrong %d", op, rows[0].Wrong)
			}
			after := testenv.RailTxBytes(t, name)
			for h := 1; h <= 2; h++ {
				r0 := after[fmt.Sprintf("h%d/rail0", h)] - before[fmt.Sprintf("h%d/rail0", h)]
				r1 := after[fmt.Sprintf("h%d/rail1", h)] - before[fmt.Sprintf("h%d/rail1", h)]
				t.Logf("%s: h%d sent %.1f MB on rail0 and %.1f MB on rail1; busbw %.3f GB/s", op, h, float64(r0)/1e6, float64(r1)/1e6, rows[0].BusBW)
				// 4 iterations of 16 MiB: each host sends at least a few
				// MiB across per iteration; each rail must carry a fair part
				if r0+r1 < 16<<20 {
					t.Errorf("%s: h%d sent only %d bytes on its rails", op, h, r0+r1)
				}
				if min(r0, r1) < (r0+r1)/5 {
					t.Errorf("%s: h%d's rails sent %d and %d bytes: want both in use (each at least a fifth)", op, h, r0, r1)
				}
			}
		})
	}
}
