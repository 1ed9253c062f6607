package shm

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/flexlink/flexlink/internal/errs"
)

// TestLostIfGone: the handshake errors a peer's death causes are marked
// lost (flexrun then waits for the root cause, the peer's own death,
// instead of blaming the rank that saw it); others are not. Among them a
// real dial of an abstract socket nobody listens on (a killed peer's).
func TestLostIfGone(t *testing.T) {
	_, refused := net.Dial("unixpacket", "@flexlink-test-nobody-listens-here")
	if refused == nil {
		t.Fatal("dialled a socket nobody listens on")
	}
	for _, tc := range []struct {
		name string
		err  error
		lost bool
	}{
		{"eof", io.EOF, true},
		{"reset", syscall.ECONNRESET, true},
		{"pipe", syscall.EPIPE, true},
		{"dial refused", refused, true},
		{"permission", syscall.EACCES, false},
		{"other", errors.New("bad hello"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(lostIfGone(tc.err), errs.ErrPeerLost); got != tc.lost {
				t.Fatalf("lostIfGone(%v) lost = %v, want %v", tc.err, got, tc.lost)
			}
		})
	}
}
