package netlink

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/internal/errs"
)

// A connection's first message is its hello, the second an empty
// confirmation that the listener receives only once it has accepted the
// hello (so the dialer learns of a refusal):
//
//	magic u32 | from u32 | to u32 | host length u8 | host | HMAC-SHA256
//
// where the HMAC, keyed with the job secret, covers the job, the
// communicator, the listener's handle (random per listener: a hello is
// good for one endpoint only) and the bytes before it. A listener drops a
// connection whose hello is short, garbled, meant for another rank or
// endpoint, or does not prove the secret.
const (
	helloTag   = 3          // every tag fits the 20 bits the ucx provider leaves
	confirmTag = 4          // the empty message after the hello
	helloMagic = 0x4c4e5846 // "FXNL"
	helloFixed = 13
	maxHello   = helloFixed + 255 + sha256.Size
)

type hello struct {
	from, to int
	host     string
}

func (h hello) body() []byte {
	host := h.host
	if len(host) > 255 {
		host = host[:255]
	}
	b := binary.LittleEndian.AppendUint32(nil, helloMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.from))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.to))
	b = append(b, byte(len(host)))
	return append(b, host...)
}

// proof is the hello's HMAC for the listener whose handle is handle.
func proof(cfg Config, handle, body []byte) []byte {
	m := hmac.New(sha256.New, cfg.Secret)
	for _, part := range [][]byte{[]byte("flexlink netlink hello"), []byte(cfg.JobID), []byte(cfg.Comm), handle} {
		m.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(part))))
		m.Write(part)
	}
	m.Write(body)
	return m.Sum(nil)
}

// marshal returns the hello for the listener whose handle is handle.
func (h hello) marshal(cfg Config, handle []byte) []byte {
	b := h.body()
	return append(b, proof(cfg, handle, b)...)
}

// checkHello parses b, a hello that reached the endpoint of cfg whose
// handle is handle.
func checkHello(b []byte, cfg Config, handle []byte) (hello, error) {
	if len(b) < helloFixed+sha256.Size || binary.LittleEndian.Uint32(b) != helloMagic {
		return hello{}, errors.New("not a flexlink hello")
	}
	n := int(b[12])
	if len(b) != helloFixed+n+sha256.Size {
		return hello{}, fmt.Errorf("hello of %d bytes names a %d-byte host", len(b), n)
	}
	h := hello{
		from: int(int32(binary.LittleEndian.Uint32(b[4:]))),
		to:   int(int32(binary.LittleEndian.Uint32(b[8:]))),
		host: string(b[helloFixed : helloFixed+n]),
	}
	body := b[:helloFixed+n]
	if !hmac.Equal(b[len(body):], proof(cfg, handle, body)) {
		return h, fmt.Errorf("hello from rank %d (host %s) does not prove the job secret of job %q communicator %q: %w",
			h.from, h.host, cfg.JobID, cfg.Comm, errs.ErrAuth)
	}
	if h.to != cfg.Rank || h.from < 0 || h.from == cfg.Rank {
		return h, fmt.Errorf("hello from rank %d to rank %d reached rank %d", h.from, h.to, cfg.Rank)
	}
	return h, nil
}
