package testenv

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/ports"
)

// PortsInRange checks listeners (what: "servers", "listeners") given r's
// ports one after the other until the range ran out: got, the ports they
// took in order, must be ascending within r, and err, what the next one
// got, ports.ErrExhausted naming FLEXLINK_PORT_RANGE and the range.
func PortsInRange(t testing.TB, what string, got []int, r ports.Range, err error) {
	t.Helper()
	if len(got) == 0 {
		t.Fatalf("no %s in %v: %v", what, r, err)
	}
	for i, p := range got {
		if !r.Contains(p) || i > 0 && p <= got[i-1] {
			t.Fatalf("%s on ports %v: want ascending ports within %v", what, got, r)
		}
	}
	if want := "FLEXLINK_PORT_RANGE=" + r.String(); !errors.Is(err, ports.ErrExhausted) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s %d on a range of %d: %v; want ports.ErrExhausted naming %s", what, len(got)+1, r.Size(), err, want)
	}
}
