package multilink

import (
	"encoding/binary"
	"fmt"

	"flexlink/fabric"
)

// Frame layout, little endian. The version byte lets a later layout be
// refused cleanly instead of misread.
//
//	0  magic   uint32 "FLML"
//	4  version uint8
//	5  (zero)  [3]byte
//	8  seq     uint64  message number in this direction
//	16 total   uint64  message length
//	24 off     uint64  part offset in the message
//	32 len     uint64  part length
//	40 tag     [4]uint64 the caller's tag
//	72 inline payload when len <= FrameBytes-72
const (
	frameMagic   = 0x4c4d4c46 // "FLML"
	frameVersion = 1
	headerLen    = 72
)

// Internal tags of the underlying messages. Frames all carry frameTag (the
// reader cannot know the next frame's header before it arrives); a payload
// carries its part's identity, so that a frame and payload that do not
// belong together fail the underlying receive instead of mixing data.
func frameTag() fabric.Tag { return fabric.Tag{frameMagic, frameVersion} }

func payloadTag(h header) fabric.Tag {
	return fabric.Tag{frameMagic<<32 | 1, h.seq, uint64(h.off), uint64(h.len)}
}

// header describes one part.
type header struct {
	seq      uint64
	total    int
	off, len int
	tag      fabric.Tag
}

func (h header) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], frameMagic)
	b[4] = frameVersion
	b[5], b[6], b[7] = 0, 0, 0
	le.PutUint64(b[8:], h.seq)
	le.PutUint64(b[16:], uint64(h.total))
	le.PutUint64(b[24:], uint64(h.off))
	le.PutUint64(b[32:], uint64(h.len))
	for i, w := range h.tag {
		le.PutUint64(b[40+8*i:], w)
	}
}

// parseHeader decodes and checks a frame's header.
func parseHeader(b []byte) (header, error) {
	le := binary.LittleEndian
	if len(b) < headerLen || le.Uint32(b) != frameMagic || b[4] != frameVersion {
		return header{}, fmt.Errorf("not a multilink frame of version %d", frameVersion)
	}
	const limit = 1 << 62
	total, off, n := le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])
	if total > limit || off > total || n > total-off {
		return header{}, fmt.Errorf("frame part [%d,+%d) outside a message of %d bytes", off, n, total)
	}
	h := header{seq: le.Uint64(b[8:]), total: int(total), off: int(off), len: int(n)}
	for i := range h.tag {
		h.tag[i] = le.Uint64(b[40+8*i:])
	}
	return h, nil
}

// ranges is a set of disjoint byte ranges, sorted: how much of a message
// has arrived. Parts sent again after a failure may overlap earlier ones;
// counting by range makes a duplicate harmless.
type ranges [][2]int

// add inserts [off, off+n) and returns the new set.
func (r ranges) add(off, n int) ranges {
	if n == 0 {
		return r
	}
	lo, hi := off, off+n
	out := make(ranges, 0, len(r)+1)
	for _, x := range r {
		switch {
		case x[1] < lo || x[0] > hi: // disjoint and not touching
			out = append(out, x)
		default:
			lo, hi = min(lo, x[0]), max(hi, x[1])
		}
	}
	out = append(out, [2]int{lo, hi})
	for i := len(out) - 1; i > 0 && out[i][0] < out[i-1][0]; i-- {
		out[i], out[i-1] = out[i-1], out[i]
	}
	return out
}

func (r ranges) bytes() int {
	n := 0
	for _, x := range r {
		n += x[1] - x[0]
	}
	return n
}
