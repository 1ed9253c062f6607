package pcie

import (
	"encoding/binary"
	"fmt"
)

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

// AppendTable appends a staging table to b: call (the sender's call
// number), slot bytes, the number of entries, then (offset, length) per
// piece, 8 bytes each, little-endian.
func AppendTable(b []byte, call uint64, slotBytes int, segs []Seg) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, call)
	b = le.AppendUint64(b, uint64(slotBytes))
	b = le.AppendUint64(b, uint64(len(segs)))
	for _, sg := range segs {
		b = le.AppendUint64(b, uint64(sg.Off))
		b = le.AppendUint64(b, uint64(sg.N))
	}
	return b
}

// ParseTable reads the staging table at the start of m (it may be padded)
// and checks it: at most MaxSegs entries, every piece inside a receive
// buffer of recvLen bytes and a staging buffer of stagingLen, in at most
// Slots slots. The error says what does not fit; a table that does not
// is a protocol error, never a partial copy.
func ParseTable(m []byte, recvLen, stagingLen int) (slotBytes int, segs []Seg, err error) {
	le := binary.LittleEndian
	if len(m) < TableHeader {
		return 0, nil, fmt.Errorf("has %d bytes", len(m))
	}
	sb, n := int(le.Uint64(m[8:])), int(le.Uint64(m[16:]))
	if n > MaxSegs || len(m) < TableHeader+16*n {
		return 0, nil, fmt.Errorf("has %d entries in %d bytes (at most %d)", n, len(m), MaxSegs)
	}
	if n > 0 && (sb <= 0 || sb > stagingLen) {
		return 0, nil, fmt.Errorf("has slots of %d bytes", sb)
	}
	segs = make([]Seg, n)
	total := 0
	for i := range segs {
		e := m[TableHeader+16*i:]
		sg := Seg{Off: int(le.Uint64(e)), N: int(le.Uint64(e[8:]))}
		if sg.Off < 0 || sg.N <= 0 || sg.Off > recvLen-sg.N {
			return 0, nil, fmt.Errorf("puts %d bytes at offset %d of a %d-byte buffer", sg.N, sg.Off, recvLen)
		}
		total += sg.N
		segs[i] = sg
	}
	if total > stagingLen || n > 0 && (total+sb-1)/sb > Slots {
		return 0, nil, fmt.Errorf("stages %d bytes in slots of %d (staging %d bytes, %d slots)", total, sb, stagingLen, Slots)
	}
	return sb, segs, nil
}
