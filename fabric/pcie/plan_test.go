package pcie

import "testing"

func TestSize(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name             string
		b                int
		f                float64
		staging, minSlot int
		want             Plan
	}{
		{"no share", 64 * mib, 0, 64 * mib, MinSlot, Plan{}},
		{"less than a page", 8 << 10, 0.25, 64 * mib, MinSlot, Plan{}},
		{"one small slot", 64 << 10, 0.25, 64 * mib, MinSlot, Plan{Bytes: 16 << 10, Cap: 16 * 16 << 10, SlotBytes: 16 << 10}},
		{"min slot", 64 * mib, 0.25, 64 * mib, MinSlot, Plan{Bytes: 16 * mib, Cap: 16 * 2 * mib, SlotBytes: 2 * mib}},
		{"slots grow", 1 << 30, 0.25, 256 * mib, MinSlot, Plan{Bytes: 256 * mib, Cap: 256 * mib, SlotBytes: 16 * mib}},
		{"staging caps", 1 << 30, 0.5, 64 * mib, MinSlot, Plan{Bytes: 64 * mib, Cap: 64 * mib, SlotBytes: 4 * mib}},
		{"rounded down to pages", 1000003, 0.3, 64 * mib, 4096, Plan{Bytes: 299008, Cap: 16 * 20480, SlotBytes: 20480}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Size(tc.b, tc.f, tc.staging, tc.minSlot)
			if got != tc.want {
				t.Fatalf("Size(%d, %g, %d, %d) = %+v, want %+v", tc.b, tc.f, tc.staging, tc.minSlot, got, tc.want)
			}
			if got.Bytes%Align != 0 || got.SlotBytes%Align != 0 || got.Bytes > tc.staging || got.Bytes > got.Cap ||
				got.SlotBytes > 0 && (got.Bytes+got.SlotBytes-1)/got.SlotBytes > Slots {
				t.Fatalf("%+v breaks the invariants (pages, staging, %d slots)", got, Slots)
			}
		})
	}
}

// TestDue: however a call cuts its pushes, the PCIe parts add up to the
// plan, each lies within its push, and the running total is whole pages.
func TestDue(t *testing.T) {
	const b = 64 << 20
	p := Size(b, 0.3, 64<<20, MinSlot)
	for _, cut := range []int{b, b / 2, 3 << 20, 1 << 20, 256 << 10} {
		pushed, staged := 0, 0
		for pushed < b {
			n := min(cut, b-pushed)
			pushed += n
			k := p.Due(pushed, b, staged, n)
			if k < 0 || k > n {
				t.Fatalf("cut %d: part %d of a push of %d", cut, k, n)
			}
			staged += k
			if pushed < b && staged%Align != 0 {
				t.Fatalf("cut %d: %d bytes staged after %d pushed: not whole pages", cut, staged, pushed)
			}
		}
		if staged != p.Bytes {
			t.Fatalf("cut %d: staged %d, planned %d", cut, staged, p.Bytes)
		}
	}
}
