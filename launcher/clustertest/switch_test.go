package clustertest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// The emulated hosts of TestSwitchTwoNICs: two namespaces with two NICs
// (rail0, rail1) each, on names and a subnet no other test uses.
const (
	switchClusterName = "fsw"
	switchClusterNet  = "10.89"
)

// TestSwitchTwoNICs: 2 hosts × 2 ranks, each host described by
// testdata/switch2x2.yaml (FLEXLINK_TOPO_FILE) as DGX A100's building
// block: one PCIe switch holding 2 GPUs and 2 NICs, the NICs being the
// emulated host's rails, both limited to 1 Gbit/s. Host buffers (there is
// no GPU here).
//
//   - defaults: allreduce and all-to-all of 4 MiB are exact (#wrong 0),
//     every cross-host link is a multilink over rail0 and rail1, and each
//     host sends at least a fifth of its bytes on each rail (the per-NIC
//     counters /sys/class/net/rail<r>/statistics/tx_bytes in the host's
//     namespace).
//   - FLEXLINK_PXN=0 (each rank sends from its own NIC only, as the
//     planner hands the NICs out): the launcher finds no GPU on these
//     hosts and sets FLEXLINK_GPU=-1, so a wrapper gives local rank l GPU
//     1-l, as a launcher on a 2-GPU host with the GPUs listed in reverse
//     would. The file's answer, worked by hand (GPUs of one switch take
//     its NICs in turn, in NIC order): GPU 0 owns rail0, GPU 1 rail1. So
//     local rank 0 must send from rail1 and local rank 1 from rail0: the
//     two ranks of a host on different NICs, and not the NICs a deal by
//     local rank would give. All-to-all is exact and each host sends at
//     least a fifth of its bytes on each rail, in all-to-all and in
//     allreduce (whose two rings, one per rail, cross between the hosts
//     from both ranks: pxn.Rings; TestSwitchRings checks them at 16 MiB).
func TestSwitchTwoNICs(t *testing.T) {
	topoFile, bench := switchNeeds(t)
	c := switchCluster(t)
	hosts := c.hosts[0] + ":2," + c.hosts[1] + ":2"

	// job runs flexbench op at 4 MiB (5 iterations with the warm-up) with
	// env, through wrapper when it is set, and returns its stderr and the
	// bytes each host sent on each rail meanwhile.
	job := func(t *testing.T, env []string, wrapper []string, op string) (string, map[string]int64) {
		t.Helper()
		before := testenv.RailTxBytes(t, switchClusterName)
		args := append([]string{"-H", hosts}, wrapper...)
		args = append(args, bench, op, "-b", "4M", "-e", "4M", "-n", "4", "-w", "1", "--no-inplace")
		p := c.flexrun(t, env, args...)
		if code := p.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", op, code, p.out.String(), p.err.String())
		}
		after := testenv.RailTxBytes(t, switchClusterName)
		checkRows(t, p, 1)
		sent := map[string]int64{}
		for k, v := range after {
			sent[k] = v - before[k]
		}
		return p.err.String(), sent
	}
	// bothRails asserts that each host sent a real amount and at least a
	// fifth of it on each rail.
	bothRails := func(t *testing.T, what string, sent map[string]int64) {
		t.Helper()
		for _, h := range []string{"h1", "h2"} {
			r0, r1 := sent[h+"/rail0"], sent[h+"/rail1"]
			t.Logf("%s: %s sent %.1f MB on rail0, %.1f MB on rail1 (%.2f / %.2f)", what, h,
				float64(r0)/1e6, float64(r1)/1e6, float64(r0)/float64(max(r0+r1, 1)), float64(r1)/float64(max(r0+r1, 1)))
			// Each host's ranks send at least 2 MiB across per iteration
			// in either operation: 5 iterations, 10 MiB at the least.
			if r0+r1 < 10<<20 {
				t.Errorf("%s: %s sent %d bytes on its rails, want at least %d", what, h, r0+r1, 10<<20)
			}
			if 5*r0 < r0+r1 || 5*r1 < r0+r1 {
				t.Errorf("%s: %s sent %d bytes on rail0 and %d on rail1: want at least a fifth on each", what, h, r0, r1)
			}
		}
	}

	base := []string{"FLEXLINK_DEBUG=INFO", "FLEXLINK_TOPO_FILE=" + topoFile}
	for _, op := range []string{"allreduce", "alltoall"} {
		t.Run("defaults/"+op, func(t *testing.T) {
			stderr, sent := job(t, base, nil, op)
			checkLinks(t, stderr) // multilinks over rail0 and rail1
			bothRails(t, "defaults "+op, sent)
		})
	}

	// The rank's GPU as a launcher on a host listing its 2 GPUs in
	// reverse would set it; the planner's NIC for that GPU, by hand.
	wrapper := []string{"/bin/sh", "-c", `FLEXLINK_GPU=$((1 - FLEXLINK_LOCAL_RANK)) exec "$0" "$@"`}
	ownRail := map[int]string{0: "rail1", 1: "rail0"} // by local rank: GPU 1 -> rail1, GPU 0 -> rail0
	pxn := append(slices.Clone(base), "FLEXLINK_PXN=0")
	for _, op := range []string{"alltoall", "allreduce"} {
		t.Run("pxn0/"+op, func(t *testing.T) {
			stderr, sent := job(t, pxn, wrapper, op)
			ownNICs(t, stderr, ownRail)
			bothRails(t, "FLEXLINK_PXN=0 "+op, sent)
		})
	}
}

// switchNeeds skips where the emulated hosts cannot come up, and returns
// the switch topology file (testdata/switch2x2.yaml) and flexbench, built
// once for the package.
func switchNeeds(t *testing.T) (topoFile, bench string) {
	t.Helper()
	testenv.EmulatedHosts(t)
	testenv.LookPath(t, "openssh-client", "ssh")
	testenv.LookPath(t, "openssh-client", "ssh-keygen")
	topoFile = filepath.Join(st.bins.repo, "launcher", "clustertest", "testdata", "switch2x2.yaml")
	bench = filepath.Join(st.bins.dir, "bin", "flexbench")
	if _, err := os.Stat(bench); err != nil {
		if out, err := command("go", "build", "-C", st.bins.repo, "-o", bench, "./cmd/flexbench"); err != nil {
			t.Fatalf("build flexbench: %v %s", err, out)
		}
	}
	return topoFile, bench
}

// ownNICs asserts that every cross-host link of every rank is a single
// net link from the NIC want names for its local rank (ranks 0, 1 on h1
// and 2, 3 on h2), and that every rank reported at least one.
func ownNICs(t *testing.T, stderr string, want map[int]string) {
	t.Helper()
	seen := map[int]bool{}
	for _, l := range netLinkRE.FindAllStringSubmatch(stderr, -1) {
		host, peerHost, kind, desc := l[1], l[4], l[5], l[6]
		if host == peerHost {
			continue
		}
		rank, _ := strconv.Atoi(l[2])
		w := want[rank%2]
		if kind != "net" || !strings.HasPrefix(desc, "net tcp "+w+" ") {
			t.Errorf("rank %d (local rank %d) on %s: link %s %q, want one net link from its own NIC %s", rank, rank%2, host, kind, desc, w)
		}
		seen[rank] = true
	}
	for r := 0; r < 4; r++ {
		if !seen[r] {
			t.Errorf("rank %d reported no link to the other host:\n%s", r, stderr)
		}
	}
}

// switchCluster brings up the two hosts of TestSwitchTwoNICs, two rails
// each at 1 Gbit/s, and takes them down when the test ends.
func switchCluster(t *testing.T) *cluster {
	t.Helper()
	return upCluster(t, switchClusterName, switchClusterNet, "--rate", "1gbit")
}
