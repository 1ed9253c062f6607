package memcopy

import (
	"bytes"
	"fmt"
	"testing"
)

// TestCopy: every length around the loop's edges and the threshold, at
// every source and destination offset within an alignment, copies what
// the built-in copy copies and touches no byte outside the destination.
func TestCopy(t *testing.T) {
	const guard = 64
	for _, n := range []int{0, 1, 127, ntMin - 1, ntMin, ntMin + 1, ntMin + ntStep - 1, 3*ntMin + 37} {
		src := make([]byte, n+ntAlign+guard)
		for i := range src {
			src[i] = byte(i*7 + i>>11)
		}
		for _, so := range []int{0, 1, 8, 31} {
			for _, do := range []int{0, 3, 16, 31} {
				if n < ntMin && (so != 0 || do != 0) {
					continue // the built-in path: one case is enough
				}
				t.Run(fmt.Sprintf("n%d-src%d-dst%d", n, so, do), func(t *testing.T) {
					dst := bytes.Repeat([]byte{0xEE}, n+ntAlign+2*guard)
					got := Copy(dst[guard+do:guard+do+n], src[so:so+n])
					if got != n {
						t.Fatalf("copied %d, want %d", got, n)
					}
					if !bytes.Equal(dst[guard+do:guard+do+n], src[so:so+n]) {
						t.Fatalf("destination differs from the source")
					}
					for i, b := range dst {
						if (i < guard+do || i >= guard+do+n) && b != 0xEE {
							t.Fatalf("byte %d outside the destination changed", i)
						}
					}
				})
			}
		}
	}
}

// TestCopyUnequalAndOverlapping: lengths differ (the shorter counts) and
// overlapping slices copy as the built-in copy does (a memmove).
func TestCopyUnequalAndOverlapping(t *testing.T) {
	n := 2*ntMin + 100
	for _, shift := range []int{-4096, -1, 1, 4096} {
		a := make([]byte, n+8192)
		for i := range a {
			a[i] = byte(i * 13)
		}
		b := bytes.Clone(a)
		lo := 4096
		Copy(a[lo+shift:lo+shift+n], a[lo:lo+n])
		copy(b[lo+shift:lo+shift+n], b[lo:lo+n])
		if !bytes.Equal(a, b) {
			t.Errorf("shift %d: overlapping copy differs from the built-in copy", shift)
		}
	}
	dst, src := make([]byte, ntMin+10), bytes.Repeat([]byte{7}, ntMin+50)
	if got := Copy(dst, src); got != ntMin+10 || !bytes.Equal(dst, src[:ntMin+10]) {
		t.Errorf("shorter destination: copied %d", got)
	}
}

func BenchmarkCopy(b *testing.B) {
	for _, n := range []int{1 << 20, 4 << 20, 32 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		b.Run(fmt.Sprintf("memcopy-%dMiB", n>>20), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Copy(dst, src)
			}
		})
		b.Run(fmt.Sprintf("builtin-%dMiB", n>>20), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}
