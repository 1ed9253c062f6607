package comm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

// TestOwnNICFromTopology: under FLEXLINK_PXN a rank opens the NIC the
// topology planner gives its GPU (FLEXLINK_GPU, FLEXLINK_TOPO_FILE), not
// the local-rank-th device: on a host file where GPU 0 sits behind the
// switch of the second NIC ("eth0") and GPU 1 behind loopback's, two
// ranks (local rank 0 on their hosts, where the old rule took the
// provider's first device, lo) driving GPU 0 link over eth0, driving GPU
// 1 over lo; a rank without a GPU takes the host's first railed NIC;
// FLEXLINK_NET_DEVICES still wins.
func TestOwnNICFromTopology(t *testing.T) {
	eth0 := testenv.SecondNIC(t)
	file := filepath.Join(t.TempDir(), "host.json")
	topo := fmt.Sprintf(`{"hostname": "h", "gpus": [
  {"index": 0, "bus_id": "0000:11:00.0", "numa_node": 0, "pci": {"root": "pci0000:00", "switches": ["0000:10:00.0"]}},
  {"index": 1, "bus_id": "0000:21:00.0", "numa_node": 0, "pci": {"root": "pci0000:00", "switches": ["0000:20:00.0"]}}],
 "nics": [
  {"name": %q, "netdev": %q, "rdma": true, "bus_id": "0000:12:00.0", "numa_node": 0, "pci": {"root": "pci0000:00", "switches": ["0000:10:00.0"]}},
  {"name": "lo", "netdev": "lo", "rdma": true, "bus_id": "0000:22:00.0", "numa_node": 0, "pci": {"root": "pci0000:00", "switches": ["0000:20:00.0"]}}]}`, eth0, eth0)
	if err := os.WriteFile(file, []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + eth0,
		"FLEXLINK_PXN": "0", "FLEXLINK_TOPO_FILE": file}
	both := func(kv ...string) [2]map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return [2]map[string]string{m, m}
	}
	for _, c := range []struct {
		name string
		env  [2]map[string]string
		want string
	}{
		{"GPU 0 owns eth0", both("FLEXLINK_GPU", "0"), eth0},
		{"GPU 1 owns lo", both("FLEXLINK_GPU", "1"), "lo"},
		{"no GPU: the first railed NIC", both("FLEXLINK_GPU", "-1"), eth0},
		{"FLEXLINK_NET_DEVICES wins", both("FLEXLINK_GPU", "0", "FLEXLINK_NET_DEVICES", "lo"), "lo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			descs := runRanksEnv(t, base, c.env)
			for r, d := range descs {
				if n := strings.Count(d, "net tcp "); n != 1 || !strings.Contains(d, " "+c.want+" ") {
					t.Errorf("rank %d: links %q, want one network link, on %s", r, d, c.want)
				}
			}
		})
	}
}
