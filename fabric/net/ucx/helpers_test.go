package ucx

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/testenv"
)

// open starts a provider on loopback with UCX's tcp transport (the one
// every machine has); it is closed when the test ends.
func open(t testing.TB) *Provider {
	t.Helper()
	t.Setenv("UCX_TLS", "tcp")
	t.Setenv("UCX_NET_DEVICES", "lo")
	p, err := Open(Options{})
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.Missing(t, "libucx0", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func loDev(t testing.TB, p *Provider) int {
	t.Helper()
	for i, d := range p.Devices() {
		if d.Name == "lo" {
			return i
		}
	}
	t.Fatalf("no loopback device in %v", p.Devices())
	return -1
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pair connects a sender (on provider a) to a receiver (on provider b).
func pair(t testing.TB, a, b *Provider) (fnet.SendConn, fnet.RecvConn) {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	l, err := b.Listen(ctx, loDev(t, b))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n := len(l.Handle()); n > fnet.MaxHandleBytes {
		t.Fatalf("handle of %d bytes", n)
	}
	s, err := a.Connect(ctx, loDev(t, a), l.Handle())
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); r.Close() })
	return s, r
}

// pattern fills b with bytes derived from seed (an independent reference
// for what must arrive).
func pattern(b []byte, seed int) []byte {
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func wait(t testing.TB, r fnet.Request) []int {
	t.Helper()
	sizes, err := r.Wait(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

func waitErr(t testing.TB, r fnet.Request) error {
	t.Helper()
	_, err := r.Wait(ctxT(t, 30*time.Second))
	if err == nil {
		t.Fatal("request succeeded, want an error")
	}
	return err
}

func recv1(t testing.TB, r fnet.RecvConn, dst []byte, tag uint64) fnet.Request {
	t.Helper()
	rq, err := r.IRecv([][]byte{dst}, []uint64{tag}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rq
}

// wait1 waits for a request just posted (30 s at most).
func wait1(r fnet.Request, err error) ([]int, error) {
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Wait(ctx)
}

func mustAddrPort(t testing.TB, ip string, port int) netip.AddrPort {
	t.Helper()
	return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
}
