package pcie

import (
	"reflect"
	"testing"
)

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

// TestTable: a table AppendTable writes reads back whole, padded or not,
// and ParseTable refuses every table that does not fit the receiver's
// buffer or staging.
func TestTable(t *testing.T) {
	segs := []Seg{{Off: 0, N: 4096}, {Off: 65536, N: 8192}}
	b := AppendTable(nil, 9, 4096, segs)
	if len(b) != TableHeader+16*len(segs) {
		t.Fatalf("table of %d bytes", len(b))
	}
	for _, m := range [][]byte{b, append(b, make([]byte, TableBytes-len(b))...)} {
		sb, got, err := ParseTable(m, 1<<20, 1<<20)
		if err != nil || sb != 4096 || !reflect.DeepEqual(got, segs) {
			t.Fatalf("read back %d %v %v, want 4096 %v", sb, got, err, segs)
		}
	}
	for _, tc := range []struct {
		name string
		m    []byte
	}{
		{"short", b[:TableHeader-1]},
		{"entries beyond the bytes", b[:TableHeader+16]},
		{"too many entries", AppendTable(nil, 1, 4096, make([]Seg, MaxSegs+1))},
		{"zero slot", AppendTable(nil, 1, 0, segs)},
		{"slot beyond the staging", AppendTable(nil, 1, 2<<20, segs)},
		{"past recv", AppendTable(nil, 1, 4096, []Seg{{Off: 1<<20 - 4096, N: 8192}})},
		{"negative offset", AppendTable(nil, 1, 4096, []Seg{{Off: -4096, N: 8192}})},
		{"empty piece", AppendTable(nil, 1, 4096, []Seg{{Off: 0, N: 0}})},
		{"too many slots", AppendTable(nil, 1, 4096, []Seg{{Off: 0, N: 17 * 4096}})},
		{"past staging", AppendTable(nil, 1, 1<<19, []Seg{{Off: 0, N: 1 << 19}, {Off: 1 << 19, N: 1<<19 + 4096}})},
	} {
		if _, _, err := ParseTable(tc.m, 1<<20, 1<<20); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
