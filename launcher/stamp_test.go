package launcher

import (
	"strings"
	"testing"
	"time"
)

func TestForwarderStampAndStreamTag(t *testing.T) {
	at := time.Date(2026, 11, 24, 14, 20, 40, 123456000, time.FixedZone("X", 3600))
	tests := []struct {
		name   string
		f      forwarder
		want   string
		stream int
	}{
		{"stdout tag", forwarder{prefix: tagPrefix(3, 0)}, "[3] a\n[3] b\n", 0},
		{"stderr tag", forwarder{prefix: tagPrefix(3, 1)}, "[3]<stderr> a\n[3]<stderr> b\n", 1},
		{"stamp before tag", forwarder{prefix: tagPrefix(0, 1), stamp: func() time.Time { return at }},
			"2026-11-24T14:20:40.123456+01:00 [0]<stderr> a\n2026-11-24T14:20:40.123456+01:00 [0]<stderr> b\n", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var dst strings.Builder
			tc.f.dst, tc.f.max = &dst, 1<<10
			if err := tc.f.run(strings.NewReader("a\nb")); err != nil {
				t.Fatal(err)
			}
			if dst.String() != tc.want {
				t.Errorf("got %q, want %q", dst.String(), tc.want)
			}
			// The stamp parses back in StampLayout.
			if tc.f.stamp != nil {
				first, _, _ := strings.Cut(dst.String(), " ")
				if got, err := time.Parse(StampLayout, first); err != nil || !got.Equal(at) {
					t.Errorf("stamp %q: %v, %v", first, got, err)
				}
			}
		})
	}
}
