package tcp

import (
	"encoding/binary"
	"fmt"

	"flexlink/fabric"
)

// Wire format: every socket of a link carries a stream of frames, each a
// 64-byte header and, for data frames, one part of one message:
//
//	0  magic   u32   frameMagic
//	4  kind    u32   kindData or kindHeartbeat
//	8  seq     u64   message number in this direction
//	16 total   u64   message length
//	24 part    u64   bytes of the message that follow on this socket
//	32 tag     [4]u64
//
// A message of fewer than stripeMin bytes travels whole on socket 0; a
// larger one is cut into consecutive parts, part i on socket i (see
// stripes), so both sides know from the length alone which socket carries
// which bytes. Every socket carries the messages in the order of their
// Sends.
const (
	hdrBytes      = 64
	frameMagic    = 0x54584c46 // "FLXT"
	kindData      = 1
	kindHeartbeat = 2
	// stripeMin is the smallest message spread across several sockets.
	stripeMin = 128 << 10
	// stripeAlign keeps part boundaries on page multiples.
	stripeAlign = 4096
	// maxMessage rejects lengths that can only come from corruption.
	maxMessage = 1 << 46
)

type header struct {
	kind             uint32
	seq, total, part uint64
	tag              fabric.Tag
}

func (h *header) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	binary.LittleEndian.PutUint32(b[4:], h.kind)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.total)
	binary.LittleEndian.PutUint64(b[24:], h.part)
	for i, w := range h.tag {
		binary.LittleEndian.PutUint64(b[32+8*i:], w)
	}
}

func parseHeader(b []byte) (header, error) {
	var h header
	if m := binary.LittleEndian.Uint32(b); m != frameMagic {
		return h, fmt.Errorf("bad frame magic %#x", m)
	}
	h.kind = binary.LittleEndian.Uint32(b[4:])
	h.seq = binary.LittleEndian.Uint64(b[8:])
	h.total = binary.LittleEndian.Uint64(b[16:])
	h.part = binary.LittleEndian.Uint64(b[24:])
	for i := range h.tag {
		h.tag[i] = binary.LittleEndian.Uint64(b[32+8*i:])
	}
	switch {
	case h.kind != kindData && h.kind != kindHeartbeat:
		return h, fmt.Errorf("bad frame kind %d", h.kind)
	case h.total > maxMessage || h.part > h.total:
		return h, fmt.Errorf("bad frame lengths %d of %d", h.part, h.total)
	}
	return h, nil
}

// stripes returns how many bytes of an n-byte message socket i of k
// carries. Part 0 always exists (it carries the tag); later parts only when
// they hold bytes.
func stripes(n uint64, k int) []uint64 {
	parts := make([]uint64, k)
	if n < stripeMin || k == 1 {
		parts[0] = n
		return parts
	}
	per := (n + uint64(k) - 1) / uint64(k)
	per = (per + stripeAlign - 1) &^ (stripeAlign - 1)
	for i := range parts {
		parts[i] = min(per, n)
		n -= parts[i]
	}
	return parts
}
