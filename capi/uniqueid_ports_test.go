package capi

import (
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
)

// TestUniqueIDPortRange: with FLEXLINK_PORT_RANGE set, ncclGetUniqueId's
// rendezvous port is in the range (from its top); a bad value fails it,
// naming the variable.
func TestUniqueIDPortRange(t *testing.T) {
	r := ports.Range{First: 31060, Last: 31069}
	l := New(Options{Env: settings.Map(map[string]string{"FLEXLINK_PORT_RANGE": r.String()})})
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	info, err := decodeID(id)
	if err != nil {
		t.Fatal(err)
	}
	if p := int(info.Addr.Port()); !r.Contains(p) {
		t.Errorf("rendezvous port %d, want one in %v", p, r)
	}
	l = New(Options{Env: settings.Map(map[string]string{"FLEXLINK_PORT_RANGE": "31069-31060"})})
	if _, err := l.GetUniqueID(); err == nil || !strings.Contains(err.Error(), "FLEXLINK_PORT_RANGE") {
		t.Errorf("GetUniqueID with FLEXLINK_PORT_RANGE=31069-31060: %v, want an error naming it", err)
	}
}
