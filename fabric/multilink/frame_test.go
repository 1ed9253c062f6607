package multilink

import (
	"testing"

	"github.com/flexlink/flexlink/fabric"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []header{
		{},
		{seq: 7, total: 8192, off: 4096, len: 0, tag: fabric.Tag{1, 2, 3, 4}},
		{seq: 1<<64 - 1, total: 1 << 40, off: 1<<40 - 5, len: 5, tag: fabric.Tag{^uint64(0), 0, 1, 2}},
		{wantAck: true, seq: 3, total: 100, off: 10, len: 20, tag: fabric.Tag{5}},
		ackOf(header{wantAck: true, seq: 3, total: 100, off: 10, len: 20, tag: fabric.Tag{5}}),
		ackOf(header{seq: 9}), // of an empty message
	} {
		b := make([]byte, headerLen)
		h.put(b)
		got, err := parseHeader(b)
		if err != nil || got != h {
			t.Fatalf("round trip of %+v: got %+v, %v", h, got, err)
		}
	}
}

func TestParseHeaderRejects(t *testing.T) {
	good := header{seq: 1, total: 100, off: 10, len: 20}
	for _, tc := range []struct {
		name   string
		mangle func(b []byte)
	}{
		{"short", nil},
		{"magic", func(b []byte) { b[0] ^= 1 }},
		{"version", func(b []byte) { b[4] = frameVersion + 1 }},
		{"part past the end", func(b []byte) { b[32] = 91 }},    // len 91 at off 10 of 100
		{"offset past the end", func(b []byte) { b[24] = 101 }}, // off 101 of 100
		{"huge total", func(b []byte) { b[23] = 0x80 }},
		{"total over 1 TiB", func(b []byte) { b[21] = 2 }}, // 2^41 + 100: never allocated
		{"unknown kind", func(b []byte) { b[5] = 2 }},
		{"unknown part flag", func(b []byte) { b[6] = 2 }},
		{"flag in an ack", func(b []byte) { b[5], b[6] = kindAck, flagWantAck }},
		{"tag in an ack", func(b []byte) { b[5], b[40] = kindAck, 1 }},
		{"ack past the end", func(b []byte) { b[5], b[32] = kindAck, 91 }},
		{"reserved byte", func(b []byte) { b[7] = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, headerLen)
			good.put(b)
			if tc.mangle == nil {
				b = b[:headerLen-1]
			} else {
				tc.mangle(b)
			}
			if h, err := parseHeader(b); err == nil {
				t.Fatalf("accepted %+v", h)
			}
		})
	}
}

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		adds  [][2]int // off, len
		want  ranges
		bytes int
	}{
		{"empty add", [][2]int{{5, 0}}, nil, 0},
		{"disjoint, out of order", [][2]int{{10, 5}, {0, 5}}, ranges{{0, 5}, {10, 15}}, 10},
		{"touching merge", [][2]int{{0, 5}, {5, 5}}, ranges{{0, 10}}, 10},
		{"duplicate part", [][2]int{{0, 8}, {0, 8}}, ranges{{0, 8}}, 8},
		{"bridge", [][2]int{{0, 4}, {8, 4}, {2, 8}}, ranges{{0, 12}}, 12},
		{"resent half", [][2]int{{0, 10}, {20, 10}, {5, 10}}, ranges{{0, 15}, {20, 30}}, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r ranges
			for _, a := range tc.adds {
				r = r.add(a[0], a[1])
			}
			if len(r) != len(tc.want) || r.bytes() != tc.bytes {
				t.Fatalf("got %v (%d bytes), want %v (%d bytes)", r, r.bytes(), tc.want, tc.bytes)
			}
			for i := range r {
				if r[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", r, tc.want)
				}
			}
		})
	}
}

func TestRangesMissing(t *testing.T) {
	have := ranges{{10, 20}, {30, 40}}
	for _, tc := range []struct {
		name   string
		off, n int
		want   ranges
	}{
		{"before", 0, 5, ranges{{0, 5}}},
		{"touching the first", 0, 10, ranges{{0, 10}}},
		{"covered", 12, 5, nil},
		{"covered exactly", 30, 10, nil},
		{"gap", 20, 10, ranges{{20, 30}}},
		{"overlapping both", 5, 40, ranges{{5, 10}, {20, 30}, {40, 45}}},
		{"after", 50, 5, ranges{{50, 55}}},
		{"empty", 15, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := have.missing(tc.off, tc.n)
			if len(got) != len(tc.want) {
				t.Fatalf("missing(%d, %d) of %v = %v, want %v", tc.off, tc.n, have, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("missing(%d, %d) of %v = %v, want %v", tc.off, tc.n, have, got, tc.want)
				}
			}
		})
	}
}
