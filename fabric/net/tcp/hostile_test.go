package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestHostileSender completes the handshake by hand, then writes a bad
// frame: the receive fails (mismatch for a length over the buffer, peer
// lost for a corrupt header or a sender that vanishes) at once, without allocating what the frame
// claims.
func TestHostileSender(t *testing.T) {
	frame := func(h header) []byte {
		b := make([]byte, hdrBytes)
		h.put(b)
		return b
	}
	for _, c := range []struct {
		name  string
		bytes []byte
		want  error
	}{
		{"HugeMessage", frame(header{kind: kindData, total: 1 << 40, length: 1 << 20}), errs.ErrMismatch},
		{"PastMaxMessage", frame(header{kind: kindData, total: maxMessage + 1, length: 1}), errs.ErrPeerLost},
		{"FrameOutsideMessage", frame(header{kind: kindData, total: 10, off: 8, length: 8}), errs.ErrPeerLost},
		{"BadMagic", make([]byte, hdrBytes), errs.ErrPeerLost},
		{"AckOnForward", frame(header{kind: kindAck, seq: 1}), errs.ErrPeerLost},
		{"LongAbortReason", frame(header{kind: kindAbort, length: 1 << 30}), errs.ErrPeerLost},
		{"HalfAFrameThenGone", frame(header{kind: kindData, total: 10, length: 10})[:20], errs.ErrPeerLost},
		{"MidMessageGone", append(frame(header{kind: kindData, total: 10, length: 10}), 1, 2, 3), errs.ErrPeerLost},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := open(Options{Sockets: 1})(t)
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := p.Listen(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := parseHandle(l.Handle())
			sock, err := net.Dial("tcp", h.addr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer sock.Close()
			hl := &hello{count: 1, nonce: h.nonce, device: "evil"}
			sock.Write(hl.marshal())
			reply := make([]byte, len(replyOK))
			if _, err := readFull(sock, reply); err != nil || string(reply) != replyOK {
				t.Fatalf("handshake: %q, %v", reply, err)
			}
			r, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			q := nettest.Recv(t, r, [][]byte{make([]byte, 10)}, []uint64{0})
			sock.Write(c.bytes)
			if strings.HasSuffix(c.name, "Gone") {
				sock.Close() // the sender dies: no abort frame
			}
			_, err = nettest.Await(t, q, "recv of a hostile frame")
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want one wrapping %v", err, c.want)
			}
			var ce *fnet.ConnError
			if !errors.As(err, &ce) || ce.Remote == "" {
				t.Fatalf("error %v does not name the remote", err)
			}
		})
	}
}
