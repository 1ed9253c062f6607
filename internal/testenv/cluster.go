package testenv

import (
	"fmt"
	"os"
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
