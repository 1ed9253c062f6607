package transports

import (
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

// TestNetRailsSetting: FLEXLINK_NET_RAILS defaults to every NIC (0), and
// reads all as every NIC too; a number bounds the rail pairs.
func TestNetRailsSetting(t *testing.T) {
	four := []Rail{{Dev: 0, Subnet: "a"}, {Dev: 1, Subnet: "b"}, {Dev: 2, Subnet: "c"}, {Dev: 3, Subnet: "d"}}
	for _, c := range []struct {
		value string
		rails int
		pairs int
		bad   bool
	}{
		{"", 0, 4, false},
		{"all", 0, 4, false},
		{" all ", 0, 4, false},
		{"0", 0, 4, false},
		{"1", 1, 1, false},
		{"3", 3, 3, false},
		{"every", 0, 0, true},
		{"65", 0, 0, true},
	} {
		env := settings.Map(map[string]string{"FLEXLINK_NET_RAILS": c.value})
		cfg, err := ReadNetConfig(env)
		if (err != nil) != c.bad {
			t.Errorf("FLEXLINK_NET_RAILS=%q: err %v, want error %v", c.value, err, c.bad)
			continue
		}
		if c.bad {
			continue
		}
		if cfg.Rails != c.rails {
			t.Errorf("FLEXLINK_NET_RAILS=%q: Rails %d, want %d", c.value, cfg.Rails, c.rails)
		}
		if got := PairRails(four, four, cfg.Rails); len(got) != c.pairs {
			t.Errorf("FLEXLINK_NET_RAILS=%q: %d rail pairs of 4 NICs, want %d", c.value, len(got), c.pairs)
		}
	}
}
