package netlink_test

// The balancer on two rails of unequal speed, on emulated hosts: the
// per-NIC byte counters must follow the shares the balancer reports.
// Root only (network namespaces); skipped through testenv elsewhere.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// The emulated cluster of this test (scripts/testcluster), on names and a
// subnet of its own.
const (
	railsCluster = "nnet"
	railsNet     = "10.88" // not 10.82: launcher/clustertest's TestNetTransport runs beside it in make test
)

var (
	sharesLineRE = regexp.MustCompile(`balancer shares: host=(h\d) rank=\d+ comm=w peer=\d+ peer_host=\S+ bytes=1048576 shares=net0:([0-9.]+)/net1:([0-9.]+)`)
	railOrderRE  = regexp.MustCompile(`link up: host=(h\d) .*\[0 net: net tcp rail0 .*; 1 net: net tcp rail1 `)
)

// TestRailsInProportion: two hosts with two rails each, rail0 limited to
// 400 Mbit/s and rail1 to 200 Mbit/s (tc tbf on every NIC's egress), one
// rank per host, allreduce 16 MiB over both rails. On each host the share
// of the bytes rail0 sent (/sys/class/net/rail0/statistics/tx_bytes in the
// host's namespace) must lie within 10% of the mean of the shares the
// balancer reported for the 1 MiB messages the ring sends over the run
// (each report is one moment of its adaptation; the counters sum the
// whole run), and both near the rates' 2:1.
func TestRailsInProportion(t *testing.T) {
	prefix, bin, tc := railsUp(t, railsCluster, railsNet)
	hosts, sshConfig := tc.Hosts, tc.SSHConfig
	for h := 1; h <= 2; h++ {
		for r, rate := range []string{"400mbit", "200mbit"} {
			ns := fmt.Sprintf("%sh%d", railsCluster, h)
			if out, err := exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", fmt.Sprintf("rail%d", r),
				"root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms").CombinedOutput(); err != nil {
				t.Fatalf("rate-limit %s rail%d: %v %s", ns, r, err, out)
			}
		}
	}
	before := testenv.RailTxBytes(t, railsCluster)
	cmd := exec.Command(filepath.Join(bin, "flexrun"), "--ssh-args", "-F "+sshConfig, "--prefix", prefix,
		"-H", hosts[0]+":1,"+hosts[1]+":1", "-x", "FLEXLINK_DEBUG=INFO", "-x", "FLEXLINK_NET=tcp",
		"-x", "FLEXLINK_NET_IFNAME=rail", "-x", "FLEXLINK_NET_RAILS=0", "-x", "FLEXLINK_CHUNK_BYTES=1M", // the shares of 1 MiB messages
		filepath.Join(bin, "flexbench"), "allreduce", "-b", "16M", "-e", "16M", "-n", "10", "-w", "2", "--no-inplace")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("flexrun still running after 60 s\nstderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("flexrun: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	after := testenv.RailTxBytes(t, railsCluster)
	logs := stderr.String()
	if n := len(railOrderRE.FindAllString(logs, -1)); n != 2 {
		t.Fatalf("%d hosts list rail0 as link 0 and rail1 as link 1, want 2:\n%s", n, logs)
	}
	sum, reports := map[string]float64{}, map[string]int{}
	for _, m := range sharesLineRE.FindAllStringSubmatch(logs, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		sum[m[1]] += v
		reports[m[1]]++
	}
	for _, h := range []string{"h1", "h2"} {
		if reports[h] == 0 {
			t.Fatalf("%s reported no shares for 1 MiB messages:\n%s", h, logs)
		}
		share := sum[h] / float64(reports[h])
		r0, r1 := after[h+"/rail0"]-before[h+"/rail0"], after[h+"/rail1"]-before[h+"/rail1"]
		got := float64(r0) / float64(r0+r1)
		t.Logf("%s: rail0 sent %.3f of %.1f MB; the balancer's shares for rail0, mean of %d reports, %.3f; the rates say 0.667", h, got, float64(r0+r1)/1e6, reports[h], share)
		if d := got - share; d > 0.1*share || d < -0.1*share {
			t.Errorf("%s: rail0 sent %.3f of the bytes, the balancer says %.3f: want within 10%%", h, got, share)
		}
		if got < 0.55 || got > 0.78 {
			t.Errorf("%s: rail0 (400 Mbit/s) sent %.3f of the bytes beside rail1 (200 Mbit/s): want about 2/3", h, got)
		}
	}
}
