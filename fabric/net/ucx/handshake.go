package ucx

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
)

// Wire formats of the side channel (all integers big-endian).
//
// Handle (≤ 32 bytes): "FXUC" | version | ip length (4 or 16) | port u16 |
// nonce u64 | ip. The nonce is random per listener: a stale handle that
// reaches a new listener on a reused port is refused.
//
// Hello (connector → listener): "FXUH" | version | nonce u64 | name length
// u8 | name (the connector's host/device, for error messages).
//
// Reply (listener → connector): "FXUR" | version | connection id u32 |
// address length u16 | UCP worker address | name length u8 | name.
//
// After the reply the TCP connection stays open as the control channel:
// frames type u8 | length u16 | text, type frameAbort (text: the reason) or
// frameClose. End of stream without frameClose means the peer is gone.
const (
	wireVersion   = 1
	maxAddrBytes  = 4096
	handshakeTime = 10 * time.Second

	frameAbort = 1
	frameClose = 2
)

var (
	magicHandle = [4]byte{'F', 'X', 'U', 'C'}
	magicHello  = [4]byte{'F', 'X', 'U', 'H'}
	magicReply  = [4]byte{'F', 'X', 'U', 'R'}
)

// handle is a decoded listen handle.
type handle struct {
	addr  netip.AddrPort
	nonce uint64
}

func newNonce() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return binary.BigEndian.Uint64(b[:])
}

func (h handle) encode() []byte {
	ip := h.addr.Addr().Unmap()
	raw := ip.AsSlice()
	b := make([]byte, 0, 16+len(raw))
	b = append(b, magicHandle[:]...)
	b = append(b, wireVersion, byte(len(raw)))
	b = binary.BigEndian.AppendUint16(b, h.addr.Port())
	b = binary.BigEndian.AppendUint64(b, h.nonce)
	return append(b, raw...)
}

func decodeHandle(b []byte) (handle, error) {
	bad := func(why string) (handle, error) {
		return handle{}, fmt.Errorf("%s (%d bytes): %w", why, len(b), fnet.ErrBadHandle)
	}
	if len(b) < 16 || [4]byte(b[:4]) != magicHandle {
		return bad("not a ucx handle")
	}
	if b[4] != wireVersion {
		return bad(fmt.Sprintf("ucx handle version %d, want %d", b[4], wireVersion))
	}
	n := int(b[5])
	if (n != 4 && n != 16) || len(b) != 16+n {
		return bad("ucx handle with a bad address length")
	}
	ip, _ := netip.AddrFromSlice(b[16:])
	port := binary.BigEndian.Uint16(b[6:])
	if port == 0 {
		return bad("ucx handle with port 0")
	}
	return handle{addr: netip.AddrPortFrom(ip, port), nonce: binary.BigEndian.Uint64(b[8:])}, nil
}

func writeHello(w io.Writer, nonce uint64, name string) error {
	b := append([]byte{}, magicHello[:]...)
	b = append(b, wireVersion)
	b = binary.BigEndian.AppendUint64(b, nonce)
	b = appendName(b, name)
	_, err := w.Write(b)
	return err
}

// readHello returns the connector's name; an error means garbage.
func readHello(r *bufio.Reader, nonce uint64) (string, error) {
	var hdr [13]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", err
	}
	if [4]byte(hdr[:4]) != magicHello || hdr[4] != wireVersion {
		return "", errors.New("bad hello magic or version")
	}
	if binary.BigEndian.Uint64(hdr[5:]) != nonce {
		return "", errors.New("hello for another listener (nonce)")
	}
	return readName(r)
}

func writeReply(w io.Writer, id uint32, addr []byte, name string) error {
	b := append([]byte{}, magicReply[:]...)
	b = append(b, wireVersion)
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint16(b, uint16(len(addr)))
	b = append(b, addr...)
	b = appendName(b, name)
	_, err := w.Write(b)
	return err
}

func readReply(r *bufio.Reader) (id uint32, addr []byte, name string, err error) {
	var hdr [11]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	if [4]byte(hdr[:4]) != magicReply || hdr[4] != wireVersion {
		err = errors.New("bad reply magic or version")
		return
	}
	id = binary.BigEndian.Uint32(hdr[5:])
	n := int(binary.BigEndian.Uint16(hdr[9:]))
	if n == 0 || n > maxAddrBytes {
		err = fmt.Errorf("worker address of %d bytes", n)
		return
	}
	addr = make([]byte, n)
	if _, err = io.ReadFull(r, addr); err != nil {
		return
	}
	name, err = readName(r)
	return
}

func appendName(b []byte, name string) []byte {
	if len(name) > 255 {
		name = name[:255]
	}
	return append(append(b, byte(len(name))), name...)
}

func readName(r *bufio.Reader) (string, error) {
	n, err := r.ReadByte()
	if err != nil {
		return "", err
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return string(b), err
}

func writeFrame(c net.Conn, typ byte, text string) error {
	if len(text) > 1024 {
		text = text[:1024]
	}
	b := []byte{typ}
	b = binary.BigEndian.AppendUint16(b, uint16(len(text)))
	b = append(b, text...)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.Write(b)
	return err
}

// readFrame returns the next control frame; err at end of stream.
func readFrame(r *bufio.Reader) (typ byte, text string, err error) {
	var hdr [3]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	b := make([]byte, binary.BigEndian.Uint16(hdr[1:]))
	if _, err = io.ReadFull(r, b); err != nil {
		return
	}
	return hdr[0], string(b), nil
}

// keepAlive bounds how long a silently vanished peer (cable cut, host
// down) goes unnoticed on the control channel: about Idle + Count×Interval.
func keepAlive() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: time.Second, Count: 5}
}
