package direct

import "testing"

func TestSharedGPU(t *testing.T) {
	for _, c := range []struct {
		bus    []string
		r1, r2 int
		ok     bool
	}{
		{[]string{"0000:18:00.0", "0000:2a:00.0"}, 0, 0, false},
		{[]string{"0000:18:00.0", "0000:18:00.0"}, 0, 1, true},
		{[]string{"0000:18:00.0", "0000:2a:00.0", "0000:2A:00.0", "0000:18:00.0"}, 1, 2, true},
		{nil, 0, 0, false},
	} {
		r1, r2, ok := SharedGPU(c.bus)
		if ok != c.ok || ok && (r1 != c.r1 || r2 != c.r2) {
			t.Errorf("SharedGPU(%v) = %d, %d, %v; want %d, %d, %v", c.bus, r1, r2, ok, c.r1, c.r2, c.ok)
		}
	}
}
