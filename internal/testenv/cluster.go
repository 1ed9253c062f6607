package testenv

import (
	"fmt"
	"strings"
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
