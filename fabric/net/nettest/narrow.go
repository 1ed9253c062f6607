package nettest

import (
	"fmt"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// Narrow wraps p as a provider that carries only bits bits of tag: its
// TagBits says so, and ISend and IRecv refuse a larger tag with
// errs.ErrNotSupported, as the ucx provider does past its 20 bits. A
// caller's test runs over Narrow(tcp, 20) to show that its tags fit the
// narrowest provider without needing one, and over a narrower one to
// show that it refuses with a clear error (net.CheckTags).
func Narrow(p net.Provider, bits int) net.Provider {
	n := narrow{bits: bits}
	n.Wrapped = Wrapped{Provider: p,
		Send: func(s net.SendConn) net.SendConn { return narrowSend{s, n} },
		Recv: func(r net.RecvConn) net.RecvConn { return narrowRecv{r, n} },
	}
	return n
}

type narrow struct {
	Wrapped
	bits int
}

func (n narrow) TagBits() int { return n.bits }

func (n narrow) check(tag uint64) error {
	if tag > net.MaxTag(n.bits) {
		return fmt.Errorf("tag %#x over the %d bits this provider carries: %w", tag, n.bits, errs.ErrNotSupported)
	}
	return nil
}

type narrowSend struct {
	net.SendConn
	n narrow
}

func (s narrowSend) ISend(buf []byte, tag uint64, mr net.MemRegion) (net.Request, error) {
	if err := s.n.check(tag); err != nil {
		return nil, err
	}
	return s.SendConn.ISend(buf, tag, mr)
}

type narrowRecv struct {
	net.RecvConn
	n narrow
}

func (r narrowRecv) IRecv(bufs [][]byte, tags []uint64, mrs []net.MemRegion) (net.Request, error) {
	for _, t := range tags {
		if err := r.n.check(t); err != nil {
			return nil, err
		}
	}
	return r.RecvConn.IRecv(bufs, tags, mrs)
}
