package clustertest

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// The emulated hosts of TestSwitchRings: two namespaces with two NICs
// (rail0, rail1) each, on names and a subnet no other test uses.
const (
	ringsClusterName = "frg"
	ringsClusterNet  = "10.90"
)

// ringsLineRE is the communicator's INFO line naming its rings.
var ringsLineRE = regexp.MustCompile(`ring collectives over every rail:.* comm=w .*rings="?([0-9,/]+)"?`)

// TestSwitchRings: the ring collectives under PXN on every rail. 2
// emulated hosts × 2 ranks, each host the PCIe switch of
// testdata/switch2x2.yaml (2 GPUs, NICs rail0 and rail1, 1 Gbit/s each),
// with FLEXLINK_PXN set, so each rank opens only its own NIC (GPU l →
// rail l; a wrapper gives local rank l GPU 1-l, as in TestSwitchTwoNICs).
// One ring in rank order crossed between the hosts from one NIC per host;
// now the communicator runs two rings, one per rail (pxn.Rings, logged at
// INFO), whose cross-host hops each join two ranks on one rail.
//
// For allreduce at 16 MiB (FLEXLINK_ALGO=ring: by default an allreduce
// on these hosts goes by host, not by the rings) and reduce-scatter and
// allgather, which share the rings, at PXN levels 0 and 2: flexbench
// reports #wrong 0, rank 0 logs two rings, every cross-host link of a
// rank is on its own NIC, and each host sends at least 25% of its bytes
// on each rail (the per-NIC counters), at least 80 MiB in all for
// allreduce. With FLEXLINK_RINGS=1 (the one ring of before) some host
// sends less than 25% on a rail: the check can fail. The allreduce by
// host (the default) spreads the same way: each rank exchanges its share
// with its peer on the other host from its own NIC.
func TestSwitchRings(t *testing.T) {
	topoFile, bench := switchNeeds(t)
	c := upCluster(t, ringsClusterName, ringsClusterNet, "--rate", "1gbit")
	hosts := c.hosts[0] + ":2," + c.hosts[1] + ":2"
	wrapper := []string{"/bin/sh", "-c", `FLEXLINK_GPU=$((1 - FLEXLINK_LOCAL_RANK)) exec "$0" "$@"`}
	ownRail := map[int]string{0: "rail1", 1: "rail0"} // by local rank: GPU 1 -> rail1, GPU 0 -> rail0
	for _, tc := range []struct {
		level, op string
		least     int64 // bytes each host must send across, over the 5 iterations
		// oneRing sets FLEXLINK_RINGS=1 (the rank-order ring, as before
		// the rings were spread): the counters must show a rail with
		// less than 25% on some host, or they could not tell.
		oneRing bool
		byHost  bool // the default allreduce (by host), not FLEXLINK_ALGO=ring
	}{
		// Each ring carries half of the 16 MiB and each of its hops
		// 2(n-1)/n of that, 12 MiB; each host sends one hop per ring:
		// 24 MiB an iteration.
		{"0", "allreduce", 80 << 20, false, false},
		{"2", "allreduce", 80 << 20, false, false},
		// A 16 MiB input (reduce-scatter) or result (allgather): each
		// ring hop carries n-1 = 3 blocks of 4 MiB halved, 6 MiB, and
		// each host sends one hop per ring: 12 MiB an iteration.
		{"0", "reducescatter", 40 << 20, false, false},
		{"0", "allgather", 40 << 20, false, false},
		{"0", "allreduce", 80 << 20, true, false},
		// By host: each rank's 8 MiB share, half out and half back, 16
		// MiB out of each host an iteration, 80 MiB of data over the 5.
		{"0", "allreduce", 72 << 20, false, true},
	} {
		name := "pxn" + tc.level + "/" + tc.op
		if tc.oneRing {
			name += "/rings=1"
		}
		if tc.byHost {
			name += "/byhost"
		}
		t.Run(name, func(t *testing.T) {
			env := []string{"FLEXLINK_DEBUG=INFO", "FLEXLINK_TOPO_FILE=" + topoFile, "FLEXLINK_PXN=" + tc.level}
			if tc.oneRing {
				env = append(env, "FLEXLINK_RINGS=1")
			}
			if tc.op == "allreduce" && !tc.byHost {
				env = append(env, "FLEXLINK_ALGO=ring")
			}
			before := testenv.RailTxBytes(t, ringsClusterName)
			args := append([]string{"-H", hosts}, wrapper...)
			args = append(args, bench, tc.op, "-b", "16M", "-e", "16M", "-n", "4", "-w", "1", "--no-inplace")
			p := c.flexrun(t, env, args...)
			if code := p.wait(t, 90*time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
			}
			after := testenv.RailTxBytes(t, ringsClusterName)
			checkRows(t, p, 1)
			for _, line := range strings.Split(p.out.String(), "\n") {
				if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
					t.Logf("flexbench: %s", strings.Join(f, " "))
				}
			}
			stderr := p.err.String()
			m := ringsLineRE.FindStringSubmatch(stderr)
			switch {
			case tc.oneRing && m != nil:
				t.Errorf("FLEXLINK_RINGS=1: rank 0 logged rings %s", m[1])
			case tc.oneRing:
			case m == nil || len(strings.Split(m[1], "/")) != 2:
				t.Errorf("rank 0 logged no two rings (%v):\n%s", m, stderr)
			default:
				t.Logf("rings %s", m[1])
			}
			ownNICs(t, stderr, ownRail)
			skewed := false
			for _, h := range []string{"h1", "h2"} {
				r0, r1 := after[h+"/rail0"]-before[h+"/rail0"], after[h+"/rail1"]-before[h+"/rail1"]
				sum := max(r0+r1, 1)
				t.Logf("FLEXLINK_PXN=%s %s: %s sent %.1f MB on rail0, %.1f MB on rail1 (%.2f / %.2f)", tc.level, tc.op, h,
					float64(r0)/1e6, float64(r1)/1e6, float64(r0)/float64(sum), float64(r1)/float64(sum))
				if r0+r1 < tc.least {
					t.Errorf("%s sent %d bytes on its rails, want at least %d", h, r0+r1, tc.least)
				}
				low := 4*r0 < r0+r1 || 4*r1 < r0+r1
				if low && !tc.oneRing {
					t.Errorf("%s sent %d bytes on rail0 and %d on rail1: want at least 25%% on each", h, r0, r1)
				}
				skewed = skewed || low
			}
			if tc.oneRing && !skewed {
				t.Errorf("one ring in rank order sent at least 25%% on each rail of both hosts: the counters cannot tell the rings apart")
			}
		})
	}
}
