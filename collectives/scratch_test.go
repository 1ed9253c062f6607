package collectives

import "testing"

func TestScratchCache(t *testing.T) {
	big := scratchMin * 2
	tests := []struct {
		name     string
		put      []int // lengths freed, in order
		get      int
		reuse    bool // whether get returns a freed buffer
		wantKept int  // bytes kept after the get
	}{
		{"same size is reused", []int{big}, big, true, 0},
		{"other size is not", []int{big}, big + 1, false, big},
		{"small buffers are not kept", []int{scratchMin - 1}, scratchMin - 1, false, 0},
		{"nothing past the bound", []int{scratchMax / 2, scratchMax / 2, scratchMax / 2}, big, false, scratchMax},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newScratchCache()
			freed := map[*byte]bool{}
			for _, n := range tc.put {
				b := make([]byte, n)
				freed[&b[0]] = true
				c.put(b)
			}
			got := c.get(tc.get)
			if (got != nil) != tc.reuse {
				t.Fatalf("get(%d) reused a buffer: %v, want %v", tc.get, got != nil, tc.reuse)
			}
			if got != nil && (len(got) != tc.get || !freed[&got[0]]) {
				t.Fatalf("get(%d) returned %d bytes, not one of the freed buffers", tc.get, len(got))
			}
			if c.bytes != tc.wantKept {
				t.Fatalf("kept %d bytes, want %d", c.bytes, tc.wantKept)
			}
		})
	}
	var nilCache *scratchCache
	nilCache.put(make([]byte, big))
	if nilCache.get(big) != nil {
		t.Fatal("a nil cache returned a buffer")
	}
}

// TestHostMemoryReusesScratch: Alloc after Free of the same size hands the
// freed memory back through a NewHostMemory, never through the zero value.
func TestHostMemoryReusesScratch(t *testing.T) {
	n := scratchMin
	for _, tc := range []struct {
		name string
		m    HostMemory
		want bool
	}{{"cached", NewHostMemory(), true}, {"zero value", HostMemory{}, false}} {
		a, _ := tc.m.Alloc(n)
		tc.m.Free(a)
		b, _ := tc.m.Alloc(n)
		if same := &a.(HostBuffer)[0] == &b.(HostBuffer)[0]; same != tc.want {
			t.Errorf("%s: reused %v, want %v", tc.name, same, tc.want)
		}
	}
}
