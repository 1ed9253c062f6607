// Package netlink turns network connections (flexlink/fabric/net) into a
// fabric.Link, so the communicator can use any network provider as a link:
// a SendConn to the peer and a RecvConn from it make one full-duplex link.
//
// Each Link message travels as two provider messages: a 40-byte header
// (the 32-byte fabric.Tag and the payload length) with tag hdrTag, then the
// payload with tag dataTag. A Recv posts both buffers in one multi-receive,
// so the payload lands straight in the caller's buffer; the header is
// checked when both have arrived. A payload longer than the posted buffer
// is the provider's mismatch (the connection is unusable afterwards); a
// shorter one, or another tag, is reported by the link, which stays usable.
package netlink

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

const (
	hdrBytes = 40
	hdrTag   = 1 // small: the ucx provider leaves users 20 bits of tag
	dataTag  = 2
)

// Link is a fabric.Link over a provider's connection pair.
type Link struct {
	peer  int
	who   string // "rank 3 (host h1) over net tcp rail0" for errors
	props fabric.Props
	s     net.SendConn
	r     net.RecvConn
	smu   sync.Mutex // orders the two ISends of one Send
	rmu   sync.Mutex
	once  sync.Once
}

// New makes the link to rank peer from s (to the peer) and r (from it). The
// link owns both connections: Close closes them. Its kind is props.Kind
// (fabric.KindNet when empty).
func New(peer int, s net.SendConn, r net.RecvConn, props fabric.Props) *Link {
	if props.Kind == "" {
		props.Kind = fabric.KindNet
	}
	return &Link{peer: peer, who: fmt.Sprintf("rank %d over %s", peer, props.Kind), props: props, s: s, r: r}
}

func (l *Link) Peer() int           { return l.peer }
func (l *Link) Props() fabric.Props { return l.props }

func (l *Link) wrap(op string, err error) error {
	return fmt.Errorf("%s %s: %w", op, l.who, err)
}

// Send posts the header and the payload; the request completes when the
// provider has completed both.
func (l *Link) Send(tag fabric.Tag, buf []byte) fabric.Request {
	hdr := make([]byte, hdrBytes)
	for i, w := range tag {
		binary.LittleEndian.PutUint64(hdr[8*i:], w)
	}
	binary.LittleEndian.PutUint64(hdr[32:], uint64(len(buf)))
	l.smu.Lock()
	q1, err1 := l.s.ISend(hdr, hdrTag, nil)
	var q2 net.Request
	var err2 error
	if err1 == nil {
		q2, err2 = l.s.ISend(buf, dataTag, nil)
	}
	l.smu.Unlock()
	if err := firstErr(err1, err2); err != nil {
		return fabric.DoneReq(l.wrap("send to", err))
	}
	req := fabric.NewReq()
	go func() {
		_, err1 := q1.Wait(context.Background()) // the provider fails it on Abort, Close and peer loss
		_, err2 := q2.Wait(context.Background())
		if err := firstErr(err1, err2); err != nil {
			req.Complete(l.wrap("send to", err))
			return
		}
		req.Complete(nil)
	}()
	return req
}

// Recv posts one multi-receive for the header and the payload.
func (l *Link) Recv(tag fabric.Tag, buf []byte) fabric.Request {
	hdr := make([]byte, hdrBytes)
	l.rmu.Lock()
	q, err := l.r.IRecv([][]byte{hdr, buf}, []uint64{hdrTag, dataTag}, nil)
	l.rmu.Unlock()
	if err != nil {
		return fabric.DoneReq(l.wrap("recv from", err))
	}
	req := fabric.NewReq()
	go func() {
		sizes, err := q.Wait(context.Background())
		if err != nil {
			req.Complete(l.wrap("recv from", err))
			return
		}
		var got fabric.Tag
		for i := range got {
			got[i] = binary.LittleEndian.Uint64(hdr[8*i:])
		}
		n := binary.LittleEndian.Uint64(hdr[32:])
		switch {
		case sizes[0] != hdrBytes || n != uint64(sizes[1]):
			req.Complete(l.wrap("recv from", fmt.Errorf("corrupt header (%d bytes, says %d for a %d-byte payload): %w",
				sizes[0], n, sizes[1], errs.ErrPeerLost)))
		case got != tag:
			req.Complete(l.wrap("recv", &fabric.TagMismatchError{Peer: l.peer, Want: tag, Got: got}))
		case n != uint64(len(buf)):
			req.Complete(l.wrap("recv from", fmt.Errorf("message has %d bytes, receive posted for %d: %w", n, len(buf), errs.ErrMismatch)))
		default:
			req.Complete(nil)
		}
	}()
	return req
}

// Rate is the line rate (bytes/s) the provider measured on the sending
// connection, for providers that measure one (tcp: from TCP_INFO); false
// when there is none. The multilink channel feeds it to the balancer
// instead of message times, which include the receiver's posting.
func (l *Link) Rate() (float64, bool) {
	if r, ok := l.s.(interface{ Rate() (float64, bool) }); ok {
		return r.Rate()
	}
	return 0, false
}

// CompletesOnDelivery is true: a Send completes when the provider's
// request does, which the net.SendConn contract makes the receiver's
// having the bytes (multilink then needs no acknowledgements of its own).
func (l *Link) CompletesOnDelivery() bool { return true }

// Abort fails every pending and later request with err and tells the peer.
func (l *Link) Abort(err error) {
	l.s.Abort(err)
	l.r.Abort(err)
}

// Close closes both connections; pending requests fail with errs.ErrClosed.
func (l *Link) Close() error {
	l.once.Do(func() {
		l.s.Close()
		l.r.Close()
	})
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

var _ fabric.Link = (*Link)(nil)
