package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

// TestNetCommand: flexinfo net lists the tcp provider's NICs; loopback is a
// NIC when FLEXLINK_NET_IFNAME names it, and FLEXLINK_NET_RAILS bounds the
// rails; a bad setting is an error naming it.
func TestNetCommand(t *testing.T) {
	run := func(env map[string]string, args ...string) (string, error) {
		var out bytes.Buffer
		err := newApp(&out, settings.Map(env)).Run(append([]string{"flexinfo", "net"}, args...))
		return out.String(), err
	}
	out, err := run(map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo"}, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Provider string
		Devices  []netDevice
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Provider != "tcp" || len(rep.Devices) != 1 || rep.Devices[0].Name != "lo" || rep.Devices[0].Rail != 0 {
		t.Fatalf("report %+v, want the tcp provider with lo as rail 0", rep)
	}
	out, err = run(map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo"})
	if err != nil || !strings.Contains(out, "tcp provider, 1 NIC(s), 1 used as rails") || !strings.Contains(out, "lo") {
		t.Fatalf("table %q, %v", out, err)
	}
	if _, err := run(map[string]string{"FLEXLINK_NET": "rdma"}); err == nil || !strings.Contains(err.Error(), "FLEXLINK_NET") {
		t.Fatalf("bad FLEXLINK_NET: %v", err)
	}
}
