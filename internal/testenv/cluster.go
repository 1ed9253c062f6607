package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Testcluster is what `scripts/testcluster up` prints about the emulated
// cluster it started: its state directory (TC_DIR), the ssh configuration
// that reaches its hosts (TC_SSH_CONFIG) and the hosts' rail-0 addresses
// (TC_HOSTS).
type Testcluster struct {
	Dir, SSHConfig string
	Hosts          []string
}

// ParseTestcluster reads the output of `scripts/testcluster up` for a
// cluster of n hosts; it fails unless that names n hosts and an ssh
// configuration.
func ParseTestcluster(out string, n int) (Testcluster, error) {
	var c Testcluster
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "TC_DIR":
			c.Dir = v
		case "TC_SSH_CONFIG":
			c.SSHConfig = v
		case "TC_HOSTS":
			c.Hosts = strings.Fields(v)
		}
	}
	if len(c.Hosts) != n || c.SSHConfig == "" {
		return Testcluster{}, fmt.Errorf("scripts/testcluster up printed %q", out)
	}
	return c, nil
}

// EmulatedHosts skips through Missing unless scripts/testcluster can bring
// up emulated hosts here: it needs root (network namespaces), ip and tc
// (iproute2) and sshd.
func EmulatedHosts(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root", "network namespaces for the emulated hosts")
	}
	LookPath(t, "iproute2", "ip")
	LookPath(t, "iproute2", "tc")
	LookPath(t, "openssh-server", "sshd")
}

// RailTxBytes reads the bytes every rail sent on both hosts of the
// emulated cluster name (/sys/class/net/rail<r>/statistics/tx_bytes in
// each host's namespace), by "h<i>/rail<r>".
func RailTxBytes(t testing.TB, name string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for h := 1; h <= 2; h++ {
		for r := 0; r < 2; r++ {
			out, err := exec.Command("ip", "netns", "exec", fmt.Sprintf("%sh%d", name, h),
				"cat", fmt.Sprintf("/sys/class/net/rail%d/statistics/tx_bytes", r)).Output()
			if err != nil {
				t.Fatalf("tx_bytes of h%d rail%d: %v", h, r, err)
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
			if err != nil {
				t.Fatalf("tx_bytes of h%d rail%d: %q: %v", h, r, out, err)
			}
			m[fmt.Sprintf("h%d/rail%d", h, r)] = v
		}
	}
	return m
}
