package settings

import (
	"strings"

	"github.com/flexlink/flexlink/internal/ports"
)

// KindPortRange is FIRST-LAST, a span of TCP ports (internal/ports).
func KindPortRange() Kind {
	return Kind{Allowed: "a port range FIRST-LAST (50000-50100) or one port, 1 to 65535", check: func(v string) error {
		_, err := ports.Parse(v)
		return err
	}}
}

// Ports is FLEXLINK_PORT_RANGE: the ports every TCP listener of the job
// takes (the zero Range, ephemeral ports, when unset). A malformed value
// is an error naming the variable.
func (e Env) Ports() (ports.Range, error) {
	s := lookup(ports.Setting)
	v := strings.TrimSpace(e.String(ports.Setting))
	if err := checkValue(s, v); err != nil {
		return ports.Range{}, err
	}
	return ports.Parse(v)
}
