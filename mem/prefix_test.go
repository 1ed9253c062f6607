package mem

import "testing"

// bytesBuf is a Buffer of host bytes that counts its Slice calls.
type bytesBuf struct {
	b      []byte
	slices *int
}

func (b bytesBuf) Len() int { return len(b.b) }
func (b bytesBuf) Slice(off, n int) Buffer {
	*b.slices++
	return bytesBuf{b: b.b[off : off+n], slices: b.slices}
}

// TestPrefix: Prefix is the buffer itself when it holds exactly n bytes
// (no Slice, no new value) and its first n bytes otherwise.
func TestPrefix(t *testing.T) {
	for _, tc := range []struct{ len, n, slices int }{{8, 8, 0}, {8, 3, 1}, {8, 0, 1}, {0, 0, 0}} {
		var slices int
		b := bytesBuf{b: make([]byte, tc.len), slices: &slices}
		p := Prefix(b, tc.n)
		if p.Len() != tc.n || slices != tc.slices {
			t.Errorf("Prefix of %d bytes to %d: %d bytes, %d slices; want %d, %d", tc.len, tc.n, p.Len(), slices, tc.n, tc.slices)
		}
		if tc.n > 0 && &p.(bytesBuf).b[0] != &b.b[0] {
			t.Errorf("Prefix of %d bytes to %d: not the buffer's first bytes", tc.len, tc.n)
		}
	}
}
