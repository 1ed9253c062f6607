package pcie

// Seg is one staged piece: N bytes for offset Off of the receiver's
// buffer. Pieces lie back to back in the staging buffer.
type Seg struct{ Off, N int }

// Plan is the size of one call's PCIe part toward a peer.
type Plan struct {
	Bytes     int // planned PCIe bytes (0: none)
	Cap       int // most PCIe bytes the call can stage
	SlotBytes int
}

// Size sizes the PCIe part of b bytes at share f: whole pages, at most
// staging, in at most Slots slots of at least minSlot (smaller copies
// waste PCIe bandwidth) unless the part is smaller still.
func Size(b int, f float64, staging, minSlot int) Plan {
	want := min(int(f*float64(b))/Align*Align, staging)
	if want <= 0 {
		return Plan{}
	}
	sb := ((want+Slots-1)/Slots + Align - 1) / Align * Align
	sb = max(sb, min(minSlot, want)) // both whole pages
	capBytes := min(staging, Slots*sb)
	return Plan{Bytes: min(want, capBytes), Cap: capBytes, SlotBytes: sb}
}

// Due is the PCIe part of the next push of n bytes, once pushed bytes of
// the call's b have been pushed (this one included) and staged are staged
// already: the bytes pushed so far times the planned share, rounded up to
// a page, less what is staged. Rounding the running total (not each part)
// makes the parts add up to the plan however the call cuts its pushes, and
// rounding it up keeps the last push's part within that push (it is at
// most its share of the push) as long as every earlier push is at least
// two pages.
func (p Plan) Due(pushed, b, staged, n int) int {
	want := (int64(min(pushed, b))*int64(p.Bytes)/int64(b) + Align - 1) / Align * Align
	return max(0, min(int(min(want, int64(p.Bytes)))-staged, n, p.Cap-staged))
}
