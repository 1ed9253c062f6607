package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Wire format. Every message travels in one frame:
//
//	offset 0  magic   1 byte  (frameMagic)
//	offset 1  version 1 byte  (wireVersion)
//	offset 2  type    1 byte  (msgType)
//	offset 3  length  4 bytes (big endian, payload bytes that follow)
//	offset 7  payload
//
// Payload fields are big-endian fixed-width integers, and byte strings
// prefixed by a 4-byte length. Decoders are strict: a payload with bytes
// left over, a short field, an unknown type or an over-long length is an
// error, never a panic, and never allocates more than the bytes that
// actually arrived (bounded by the declared length, itself bounded).
const (
	frameMagic   = 0xFB
	wireVersion  = 1
	headerLen    = 7
	MaxFrameSize = 64 << 20 // largest payload accepted once a rank has joined

	// maxHandshakeFrame bounds frames before authentication, so that an
	// unauthenticated peer cannot make the server buffer much.
	maxHandshakeFrame = 4 << 10
	// readChunk is the most payload allocated before any of it has arrived.
	readChunk = 4 << 20
)

// msgType names the kind of message a frame carries.
type msgType uint8

const (
	tHello     msgType = iota + 1 // client → server: rank, size, job, host, client nonce
	tChallenge                    // server → client: server nonce, server's proof
	tProof                        // client → server: client's proof
	tWelcome                      // server → client: joined
	tReject                       // server → client: refused (class, text)
	tHeartbeat                    // both ways, no payload
	tBye                          // client → server: goodbye (leaving normally)
	tColl                         // client → server: contribution to a collective
	tCollRes                      // server → client: a collective's result or failure
	tPut                          // client → server: put key (request id)
	tGet                          // client → server: get key (request id)
	tReply                        // server → client: answer to a put or get
	tAbort                        // both ways: the job fails (class, rank, text)
	tLast                         // one past the last valid type
)

func (t msgType) String() string {
	const names = "invalid hello challenge proof welcome reject heartbeat bye coll collres put get reply abort"
	if t < tLast {
		return strings.Fields(names)[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// errMalformed marks protocol violations (garbage, truncation, bad fields).
var errMalformed = errors.New("malformed frame")

// frame is one decoded frame. payload is owned by whoever read it.
type frame struct {
	typ     msgType
	payload []byte
}

// readFrame reads one frame whose payload is at most max bytes. It returns
// io.EOF only when r ends cleanly before the first byte of a frame.
func readFrame(r io.Reader, max int) (frame, error) {
	var h [headerLen]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF && n == 0 {
			return frame{}, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return frame{}, fmt.Errorf("truncated header (%d of %d bytes): %w", n, headerLen, errMalformed)
		}
		return frame{}, err
	}
	if h[0] != frameMagic {
		return frame{}, fmt.Errorf("bad magic 0x%02x: %w", h[0], errMalformed)
	}
	if h[1] != wireVersion {
		return frame{}, fmt.Errorf("unsupported wire version %d (want %d): %w", h[1], wireVersion, errMalformed)
	}
	t := msgType(h[2])
	if t == 0 || t >= tLast {
		return frame{}, fmt.Errorf("unknown message type %d: %w", h[2], errMalformed)
	}
	n := uint64(binary.BigEndian.Uint32(h[3:]))
	if n > uint64(max) {
		return frame{}, fmt.Errorf("%s frame of %d bytes exceeds limit %d: %w", t, n, max, errMalformed)
	}
	payload, err := readPayload(r, int(n))
	if err != nil {
		return frame{}, fmt.Errorf("%s frame: %w", t, err)
	}
	return frame{typ: t, payload: payload}, nil
}

// readPayload reads exactly n bytes. Up to readChunk it allocates the
// whole payload at once; beyond that the buffer grows (doubling) only as
// bytes arrive, so a peer that declares a large frame and sends little
// costs at most readChunk.
func readPayload(r io.Reader, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	buf := make([]byte, min(n, readChunk))
	got := 0
	for {
		k, err := io.ReadFull(r, buf[got:])
		got += k
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, fmt.Errorf("truncated payload (%d of %d bytes): %w", got, n, errMalformed)
			}
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		grown := make([]byte, min(n, 2*len(buf)))
		copy(grown, buf)
		buf = grown
	}
}

// enc builds a payload.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)     { e.b = append(e.b, v) }
func (e *enc) u32(v uint32)   { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) i32(v int32)    { e.u32(uint32(v)) }
func (e *enc) u64(v uint64)   { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) bytes(v []byte) { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *enc) str(v string)   { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *enc) raw(v []byte)   { e.b = append(e.b, v...) }

// dec reads a payload; the first failure sticks and later reads return
// zero values. Byte slices returned alias the payload.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("short %s: %w", what, errMalformed)
	}
	d.b = nil
}

func (d *dec) take(n int, what string) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() uint8 {
	if v := d.take(1, "u8"); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) u32() uint32 {
	if v := d.take(4, "u32"); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *dec) i32() int32 { return int32(d.u32()) }

func (d *dec) u64() uint64 {
	if v := d.take(8, "u64"); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *dec) bytes() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.fail("bytes")
		return nil
	}
	return d.take(int(n), "bytes")
}

// strMax reads a string of at most max bytes.
func (d *dec) strMax(max int, what string) string {
	v := d.bytes()
	if d.err == nil && len(v) > max {
		d.err = fmt.Errorf("%s of %d bytes exceeds %d: %w", what, len(v), max, errMalformed)
	}
	return string(v)
}

// end reports the sticky error, or an error if bytes are left over.
func (d *dec) end() error {
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%d trailing bytes: %w", len(d.b), errMalformed)
	}
	return nil
}
