package settings

import (
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/ports"
)

// TestPortRange: FLEXLINK_PORT_RANGE reads as internal/ports parses it,
// and a bad value is refused by Ports and by Validate, naming the
// variable.
func TestPortRange(t *testing.T) {
	for _, c := range []struct {
		v    string
		want ports.Range
		bad  bool
	}{
		{"", ports.Range{}, false},
		{"50000-50100", ports.Range{First: 50000, Last: 50100}, false},
		{"50000", ports.Range{First: 50000, Last: 50000}, false},
		{"50100-50000", ports.Range{}, true},
		{"0-100", ports.Range{}, true},
		{"50000-70000", ports.Range{}, true},
		{"fifty", ports.Range{}, true},
	} {
		env := Map(map[string]string{"FLEXLINK_PORT_RANGE": c.v})
		got, err := env.Ports()
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "FLEXLINK_PORT_RANGE") {
				t.Errorf("%q: Ports() = %v, %v; want an error naming FLEXLINK_PORT_RANGE", c.v, got, err)
			}
			if err := Validate(env); err == nil || !strings.Contains(err.Error(), "FLEXLINK_PORT_RANGE") {
				t.Errorf("%q: Validate = %v, want an error naming FLEXLINK_PORT_RANGE", c.v, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: Ports() = %v, %v; want %v", c.v, got, err, c.want)
		}
	}
}
