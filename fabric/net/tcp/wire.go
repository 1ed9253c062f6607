package tcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	fnet "github.com/flexlink/flexlink/fabric/net"
)

// Wire format, version 1.
//
// Handle (28 bytes for IPv4, 40 for IPv6), published out of band:
//
//	0  magic   "FXNH"
//	4  version u8
//	5  family  u8     4 or 6
//	6  port    u16
//	8  nonce   [16]   random per listener
//	24 ip      [4] or [16]
//
// Every socket of a connection opens with a 64-byte hello from the
// connecting side, answered by an 8-byte reply from the listener:
//
//	0  magic   "FXNTHELO"
//	8  version u16
//	10 index   u16    this socket's index in the connection
//	12 count   u16    sockets in the connection
//	14 zero    u16
//	16 nonce   [16]   echoed from the handle: a stray or stale dial is dropped
//	32 conn    [16]   random connection id, the same on every socket
//	48 device  [16]   the sender's device name (for error messages)
//
// Then each socket carries 48-byte frame headers, data frames followed by
// their payload:
//
//	0  magic   u32    frameMagic
//	4  kind    u8     kindData, kindBeat, kindAbort (forward); kindAck, kindBeat, kindAbort (reverse)
//	5  zero    [3]
//	8  seq     u64    message number (data) or messages received (ack)
//	16 tag     u64
//	24 total   u64    message length
//	32 offset  u64    where this frame's bytes go in the message
//	40 length  u64    bytes that follow (abort: the reason's length)
//
// Forward frames go from sender to receiver on every socket; reverse frames
// go back on socket 0 only.
const (
	handleMagic   = "FXNH"
	helloMagic    = "FXNTHELO"
	replyOK       = "FXNTOK01"
	wireVersion   = 1
	nonceBytes    = 16
	connIDBytes   = 16
	devNameBytes  = 16
	helloBytes    = 64
	hdrBytes      = 48
	frameMagic    = 0x464e5846 // "FXNF"
	maxSockets    = 64
	maxReason     = 256
	maxMessage    = 1 << 46
	kindData      = 1
	kindBeat      = 2
	kindAbort     = 3
	kindAck       = 4
	handleV4Bytes = 24 + 4
	handleV6Bytes = 24 + 16
)

type handle struct {
	addr  netip.AddrPort
	nonce [nonceBytes]byte
}

func (h handle) marshal() []byte {
	ip := h.addr.Addr()
	b := append([]byte(handleMagic), wireVersion, 4)
	if !ip.Is4() {
		b[5] = 6
	}
	b = binary.LittleEndian.AppendUint16(b, h.addr.Port())
	b = append(b, h.nonce[:]...)
	return append(b, ip.AsSlice()...)
}

// parseHandle checks every byte it can: length, magic, version, family,
// port and address. Errors wrap net.ErrBadHandle.
func parseHandle(b []byte) (handle, error) {
	var h handle
	bad := func(why string, args ...any) (handle, error) {
		return h, fmt.Errorf("tcp handle of %d bytes: %s: %w", len(b), fmt.Sprintf(why, args...), fnet.ErrBadHandle)
	}
	if len(b) != handleV4Bytes && len(b) != handleV6Bytes {
		return bad("want %d or %d bytes", handleV4Bytes, handleV6Bytes)
	}
	if string(b[:4]) != handleMagic {
		return bad("not a tcp provider handle")
	}
	if b[4] != wireVersion {
		return bad("version %d, this provider speaks %d", b[4], wireVersion)
	}
	want := map[byte]int{4: handleV4Bytes, 6: handleV6Bytes}[b[5]]
	if want != len(b) {
		return bad("address family %d does not fit the length", b[5])
	}
	port := binary.LittleEndian.Uint16(b[6:])
	copy(h.nonce[:], b[8:24])
	ip, ok := netip.AddrFromSlice(b[24:])
	if !ok || port == 0 || ip.IsUnspecified() || ip.IsMulticast() {
		return bad("address %v port %d cannot be dialled", ip, port)
	}
	h.addr = netip.AddrPortFrom(ip.Unmap(), port)
	return h, nil
}

type hello struct {
	index, count int
	nonce        [nonceBytes]byte
	conn         [connIDBytes]byte
	device       string
}

func (h *hello) marshal() []byte {
	b := make([]byte, helloBytes)
	copy(b, helloMagic)
	binary.LittleEndian.PutUint16(b[8:], wireVersion)
	binary.LittleEndian.PutUint16(b[10:], uint16(h.index))
	binary.LittleEndian.PutUint16(b[12:], uint16(h.count))
	copy(b[16:], h.nonce[:])
	copy(b[32:], h.conn[:])
	copy(b[48:], h.device)
	return b
}

func parseHello(b []byte, nonce [nonceBytes]byte) (*hello, error) {
	h := &hello{}
	switch {
	case string(b[:8]) != helloMagic:
		return nil, fmt.Errorf("not a flexlink net hello")
	case binary.LittleEndian.Uint16(b[8:]) != wireVersion:
		return nil, fmt.Errorf("hello version %d, want %d", binary.LittleEndian.Uint16(b[8:]), wireVersion)
	case !bytes.Equal(b[16:32], nonce[:]):
		return nil, fmt.Errorf("hello carries another listener's nonce")
	}
	h.index = int(binary.LittleEndian.Uint16(b[10:]))
	h.count = int(binary.LittleEndian.Uint16(b[12:]))
	if h.count < 1 || h.count > maxSockets || h.index >= h.count {
		return nil, fmt.Errorf("hello for socket %d of %d", h.index, h.count)
	}
	copy(h.nonce[:], b[16:])
	copy(h.conn[:], b[32:])
	h.device = string(bytes.TrimRight(b[48:64], "\x00"))
	return h, nil
}

type header struct {
	kind                         uint8
	seq, tag, total, off, length uint64
}

func (h *header) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4], b[5], b[6], b[7] = h.kind, 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.tag)
	binary.LittleEndian.PutUint64(b[24:], h.total)
	binary.LittleEndian.PutUint64(b[32:], h.off)
	binary.LittleEndian.PutUint64(b[40:], h.length)
}

// parseHeader validates a frame header; forward says which direction it
// came on. No length it accepts can exceed maxMessage (data) or maxReason
// (abort), and a data frame always lies inside its message.
func parseHeader(b []byte, forward bool) (header, error) {
	var h header
	if m := binary.LittleEndian.Uint32(b); m != frameMagic {
		return h, fmt.Errorf("bad frame magic %#x", m)
	}
	h.kind = b[4]
	h.seq = binary.LittleEndian.Uint64(b[8:])
	h.tag = binary.LittleEndian.Uint64(b[16:])
	h.total = binary.LittleEndian.Uint64(b[24:])
	h.off = binary.LittleEndian.Uint64(b[32:])
	h.length = binary.LittleEndian.Uint64(b[40:])
	ok := b[5] == 0 && b[6] == 0 && b[7] == 0
	switch h.kind {
	case kindData:
		ok = ok && forward && h.total <= maxMessage && h.off <= h.total && h.length <= h.total-h.off &&
			(h.length > 0 || h.total == 0)
	case kindAck:
		ok = ok && !forward && h.length == 0
	case kindBeat:
		ok = ok && h.length == 0
	case kindAbort:
		ok = ok && h.length <= maxReason
	default:
		ok = false
	}
	if !ok {
		return h, fmt.Errorf("bad frame: kind %d seq %d total %d offset %d length %d", h.kind, h.seq, h.total, h.off, h.length)
	}
	return h, nil
}

// parts cuts an n-byte message for k sockets: below stripeMin it travels
// whole on socket seq%k; above, in k page-aligned contiguous parts, part i
// on socket (seq+i)%k. It returns the byte ranges per socket (length 0:
// nothing on that socket, except a zero-length message's one frame).
func parts(seq uint64, n uint64, k int, stripeMin uint64) []span {
	out := make([]span, k)
	first := int(seq % uint64(k))
	if n < stripeMin || k == 1 {
		out[first] = span{0, n, true}
		return out
	}
	per := (n + uint64(k) - 1) / uint64(k)
	per = (per + 4095) &^ 4095
	off := uint64(0)
	for i := range k {
		l := min(per, n-off)
		if l > 0 {
			out[(first+i)%k] = span{off, l, true}
		}
		off += l
	}
	return out
}

type span struct {
	off, len uint64
	used     bool
}
