package balance

import (
	"math"
	"math/rand/v2"
	"testing"
)

// checkParts fails unless parts cover [0, bytes) exactly, in order, with
// aligned boundaries and no empty part.
func checkParts(t *testing.T, parts []Part, bytes, align int) {
	t.Helper()
	off := 0
	for i, p := range parts {
		if p.Off != off {
			t.Fatalf("%d bytes: part %d %+v starts at %d, want %d (gap or overlap)", bytes, i, p, p.Off, off)
		}
		if p.Len <= 0 && bytes > 0 {
			t.Fatalf("%d bytes: empty part %d %+v", bytes, i, p)
		}
		if p.Off%align != 0 {
			t.Fatalf("%d bytes: part %d %+v not aligned to %d", bytes, i, p, align)
		}
		off += p.Len
	}
	if off != bytes {
		t.Fatalf("parts %+v cover %d bytes, want %d", parts, off, bytes)
	}
}

func TestDivide(t *testing.T) {
	two := []Share{{Link: 0, Fraction: 0.92}, {Link: 1, Fraction: 0.08}}
	for _, tc := range []struct {
		name   string
		shares []Share
		bytes  int
		align  int
		want   []Part
	}{
		{"one link", []Share{{Link: 3, Fraction: 1}}, 1000, 4096, []Part{{3, 0, 1000}}},
		{"zero bytes", two, 0, 4096, []Part{{Link: 0}}},
		{"nvlink+pcie 1 MiB", two, 1 << 20, 4096, []Part{{0, 0, 966656}, {1, 966656, 81920}}},
		{"unaligned tail", two, 1<<20 + 5, 4096, []Part{{0, 0, 966656}, {1, 966656, 81925}}},
		{"tiny share rounds away", []Share{{0, 0.999}, {1, 0.001}}, 1 << 20, 4096, []Part{{0, 0, 1 << 20}}},
		{"smaller than align", two, 3000, 4096, []Part{{0, 0, 3000}}},
		{"element alignment", two, 100, 4, []Part{{0, 0, 92}, {1, 92, 8}}},
		{"unnormalised shares", []Share{{0, 3}, {1, 1}}, 8, 1, []Part{{0, 0, 6}, {1, 6, 2}}},
		{"no links", nil, 100, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := divide(tc.shares, tc.bytes, tc.align)
			if len(got) != len(tc.want) {
				t.Fatalf("parts %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("parts %+v, want %+v", got, tc.want)
				}
			}
			if tc.shares != nil {
				checkParts(t, got, tc.bytes, max(tc.align, 1))
			}
		})
	}
}

// TestDivideRandom: random shares, sizes and alignments always give an
// exact, aligned cover, and each part is within one alignment unit of its
// share (each boundary is rounded by at most half a unit).
func TestDivideRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	for range 5000 {
		n := 1 + rng.IntN(MaxLinks)
		shares := make([]Share, n)
		sum := 0.0
		for i := range shares {
			shares[i] = Share{Link: i, Fraction: rng.Float64()}
			sum += shares[i].Fraction
		}
		for i := range shares {
			shares[i].Fraction /= sum
		}
		bytes := rng.IntN(1 << 24)
		align := []int{1, 2, 4, 8, 4096}[rng.IntN(5)]
		parts := divide(shares, bytes, align)
		checkParts(t, parts, bytes, align)
		if bytes == 0 {
			continue
		}
		for _, p := range parts {
			want := shares[p.Link].Fraction * float64(bytes)
			if math.Abs(float64(p.Len)-want) > float64(align) {
				t.Fatalf("share %.4f of %d bytes, align %d: part of %d bytes", shares[p.Link].Fraction, bytes, align, p.Len)
			}
		}
	}
}
