package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Each socket of a link starts with a mutual proof of the job secret,
// driven by the lower rank, which dials:
//
//	M1 dialer→listener  hello: magic, from, to, socket index, sockets,
//	                    the listener's endpoint id, nonceD, job, comm
//	M2 listener→dialer  nonceL, HMAC(secret, "listener" | M1 | nonceL)
//	M3 dialer→listener  HMAC(secret, "dialer" | M1 | nonceL)
//	M4 listener→dialer  0, once the listener's Connect has all sockets
//
// The endpoint id (random, from the listener's address) makes sure a dial
// reaches the endpoint it was meant for, not another communicator's or an
// older process's on a reused port.
const (
	helloMagic = "FLXTCP01"
	nonceBytes = 32
	idBytes    = 16
	macBytes   = sha256.Size
	maxSockets = 16
	helloFixed = len(helloMagic) + 4 + 4 + 2 + 2 + idBytes + nonceBytes
)

type hello struct {
	from, to     int
	index, socks int
	id           [idBytes]byte
	nonce        [nonceBytes]byte
	job, comm    string
}

func (h *hello) marshal() []byte {
	b := make([]byte, 0, helloFixed+2+len(h.job)+len(h.comm))
	b = append(b, helloMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.from))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.to))
	b = binary.LittleEndian.AppendUint16(b, uint16(h.index))
	b = binary.LittleEndian.AppendUint16(b, uint16(h.socks))
	b = append(b, h.id[:]...)
	b = append(b, h.nonce[:]...)
	b = append(b, byte(len(h.job)))
	b = append(b, h.job...)
	b = append(b, byte(len(h.comm)))
	return append(b, h.comm...)
}

// readHello reads M1 and returns it parsed and as the bytes it came in.
func readHello(r io.Reader) (*hello, []byte, error) {
	b := make([]byte, helloFixed+1, helloFixed+2+2*255)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, nil, fmt.Errorf("read hello: %w", err)
	}
	if string(b[:len(helloMagic)]) != helloMagic {
		return nil, nil, errors.New("not a flexlink tcp hello")
	}
	h := &hello{}
	p := b[len(helloMagic):]
	h.from = int(int32(binary.LittleEndian.Uint32(p)))
	h.to = int(int32(binary.LittleEndian.Uint32(p[4:])))
	h.index = int(binary.LittleEndian.Uint16(p[8:]))
	h.socks = int(binary.LittleEndian.Uint16(p[10:]))
	copy(h.id[:], p[12:])
	copy(h.nonce[:], p[12+idBytes:])
	for i, s := range []*string{&h.job, &h.comm} {
		n := int(b[len(b)-1])
		more := n
		if i == 0 {
			more++ // and the comm length byte
		}
		start := len(b)
		b = b[:start+more]
		if _, err := io.ReadFull(r, b[start:]); err != nil {
			return nil, nil, fmt.Errorf("read hello: %w", err)
		}
		*s = string(b[start : start+n])
	}
	return h, b, nil
}

func proof(secret []byte, role string, m1, nonceL []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("flexlink tcp " + role + "\x00"))
	m.Write(m1)
	m.Write(nonceL)
	return m.Sum(nil)
}

func newNonce() (n [nonceBytes]byte) {
	rand.Read(n[:])
	return n
}
