package multilink

import (
	"encoding/binary"
	"fmt"

	"github.com/flexlink/flexlink/fabric"
)

// Frame layout, little endian. The version byte lets a later layout be
// refused cleanly instead of misread (it is also in the frames' tag, so a
// peer of another version fails the first frame receive).
//
//	0  magic   uint32 "FLML"
//	4  version uint8
//	5  kind    uint8   kindPart or kindAck
//	6  flags   uint8   a part's flagWantAck; zero in an ack
//	7  (zero)  uint8
//	8  seq     uint64  message number in this direction
//	16 total   uint64  message length
//	24 off     uint64  part offset in the message
//	32 len     uint64  part length
//	40 tag     [4]uint64 the caller's tag; zero in an ack
//	72 inline payload when len <= FrameBytes-72 (parts only)
//
// A part frame travels in the direction of its message. An ack frame
// travels the other way and names a part the receiver holds: seq, total,
// off and len are copied from the part's frame.
const (
	frameMagic   = 0x4c4d4c46 // "FLML"
	frameVersion = 2
	headerLen    = 72
)

// Frame kinds.
const (
	kindPart = 0
	kindAck  = 1
)

// flagWantAck in a part frame asks the receiver to acknowledge the part.
const flagWantAck = 1

// Internal tags of the underlying messages. Frames all carry frameTag (the
// reader cannot know the next frame's header before it arrives); a payload
// carries its part's identity, so that a frame and payload that do not
// belong together fail the underlying receive instead of mixing data.
func frameTag() fabric.Tag { return fabric.Tag{frameMagic, frameVersion} }

func payloadTag(h header) fabric.Tag {
	return fabric.Tag{frameMagic<<32 | 1, h.seq, uint64(h.off), uint64(h.len)}
}

// header describes one part, or acknowledges one.
type header struct {
	kind     uint8 // kindPart or kindAck
	wantAck  bool  // a part whose sender waits for its ack
	seq      uint64
	total    int
	off, len int
	tag      fabric.Tag
}

// ackOf returns the header of the ack frame for part h.
func ackOf(h header) header {
	return header{kind: kindAck, seq: h.seq, total: h.total, off: h.off, len: h.len}
}

func (h header) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], frameMagic)
	b[4] = frameVersion
	b[5], b[6], b[7] = h.kind, 0, 0
	if h.wantAck {
		b[6] = flagWantAck
	}
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
	kind, flags := b[5], b[6]
	switch {
	case kind != kindPart && kind != kindAck:
		return header{}, fmt.Errorf("frame of unknown kind %d", kind)
	case kind == kindPart && flags&^flagWantAck != 0, kind == kindAck && flags != 0, b[7] != 0:
		return header{}, fmt.Errorf("frame of kind %d with unknown flags %#x %#x", kind, flags, b[7])
	}
	// A message is at most 1 TiB: a corrupt length must not reach make()
	// (the receiver allocates staged and discarded parts).
	const limit = 1 << 40
	total, off, n := le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])
	if total > limit || off > total || n > total-off {
		return header{}, fmt.Errorf("frame part [%d,+%d) outside a message of %d bytes", off, n, total)
	}
	h := header{kind: kind, wantAck: flags&flagWantAck != 0, seq: le.Uint64(b[8:]), total: int(total), off: int(off), len: int(n)}
	for i := range h.tag {
		h.tag[i] = le.Uint64(b[40+8*i:])
	}
	if kind == kindAck && h.tag != (fabric.Tag{}) {
		return header{}, fmt.Errorf("ack frame with a tag %x", h.tag)
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

// missing returns the parts of [off, off+n) that r does not cover, in
// order.
func (r ranges) missing(off, n int) ranges {
	var out ranges
	lo, hi := off, off+n
	for _, x := range r {
		if x[1] <= lo {
			continue
		}
		if x[0] >= hi {
			break
		}
		if x[0] > lo {
			out = append(out, [2]int{lo, x[0]})
		}
		lo = x[1]
		if lo >= hi {
			break
		}
	}
	if lo < hi {
		out = append(out, [2]int{lo, hi})
	}
	return out
}
