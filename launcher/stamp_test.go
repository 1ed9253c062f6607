package launcher

import (
	"strings"
	"testing"
	"time"
)

// TestForwarderStampAndStreamTag: the tags and stamps of OpenMPI 4.1's
// mpirun --tag-output / --timestamp-output (orte iof: "[JOB,RANK]<STREAM>:"
// and ctime() before it, nothing between them and the line).
func TestForwarderStampAndStreamTag(t *testing.T) {
	at := time.Date(2026, 11, 4, 14, 20, 40, 123456000, time.FixedZone("X", 3600))
	stamp := func() time.Time { return at }
	tests := []struct {
		name       string
		tag, stamp bool
		rank       int
		stream     int
		want       string
	}{
		{"stdout tag", true, false, 3, 0, "[1,3]<stdout>:a\n[1,3]<stdout>:b\n"},
		{"stderr tag", true, false, 3, 1, "[1,3]<stderr>:a\n[1,3]<stderr>:b\n"},
		{"stamp before tag", true, true, 0, 1, "Wed Nov  4 14:20:40 2026[1,0]<stderr>:a\nWed Nov  4 14:20:40 2026[1,0]<stderr>:b\n"},
		{"stamp alone names the stream", false, true, 12, 0, "Wed Nov  4 14:20:40 2026<stdout>:a\nWed Nov  4 14:20:40 2026<stdout>:b\n"},
		{"neither", false, false, 0, 0, "a\nb\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var dst strings.Builder
			f := forwarder{dst: &dst, max: 1 << 10, prefix: outputPrefix(tc.rank, tc.stream, tc.tag, tc.stamp)}
			if tc.stamp {
				f.stamp = stamp
			}
			if err := f.run(strings.NewReader("a\nb")); err != nil {
				t.Fatal(err)
			}
			if dst.String() != tc.want {
				t.Errorf("got %q, want %q", dst.String(), tc.want)
			}
			// The stamp parses back in StampLayout (to the second).
			if tc.stamp {
				first := dst.String()[:len(StampLayout)]
				if got, err := time.ParseInLocation(StampLayout, first, at.Location()); err != nil || !got.Equal(at.Truncate(time.Second)) {
					t.Errorf("stamp %q: %v, %v", first, got, err)
				}
			}
		})
	}
}
