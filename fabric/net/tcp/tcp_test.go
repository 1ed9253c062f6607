package tcp

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
)

// -large sets the suite's largest message (the 1 GiB:
// go test ./fabric/net/tcp -run Conformance -args -large=1073741824).
var large = flag.Int("large", 64<<20, "largest message of the conformance suite, bytes")

func open(opt Options) func(t *testing.T) fnet.Provider {
	return func(t *testing.T) fnet.Provider {
		t.Helper()
		if opt.IfName == "" {
			opt.IfName = "lo"
		}
		p, err := New(opt)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// junk opens a raw TCP connection to the listener in handle and writes b.
func junk(t *testing.T, handle, b []byte) {
	t.Helper()
	h, err := parseHandle(handle)
	if err != nil {
		t.Fatal(err)
	}
	nettest.JunkTCP(t, h.addr.String(), b)
}

func TestConformance(t *testing.T) {
	for _, c := range []struct {
		socks, stripe int
	}{{1, 0}, {2, 0}, {3, 4096}} {
		t.Run(fmt.Sprintf("sockets=%d,stripe=%d", c.socks, c.stripe), func(t *testing.T) {
			lg := *large
			if c.socks != 2 {
				lg = min(lg, 8<<20) // the large message once is enough
			}
			nettest.Run(t, open(Options{Sockets: c.socks, StripeMin: c.stripe}), nettest.Large(lg), nettest.Junk(junk))
		})
	}
}

// TestSilentPeer: heartbeats keep an idle connection up for several
// timeouts; once the path is cut without closing (a proxy stops
// forwarding), both sides fail with ErrPeerLost after Options.Timeout.
func TestSilentPeer(t *testing.T) {
	// A second: with 300 ms, a stall of 140 ms of this process on two
	// loaded cores read as silence (heartbeats every timeout/5).
	const timeout = time.Second
	pa := open(Options{Timeout: timeout})(t)
	pb := open(Options{Timeout: timeout})(t)
	defer pa.Close()
	defer pb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := pb.Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h, _ := parseHandle(l.Handle())
	px := startProxy(t, h.addr.String())
	h.addr = px.addr
	acc := make(chan fnet.RecvConn, 1)
	go func() { r, _ := l.Accept(ctx); acc <- r }()
	s, err := pa.Connect(ctx, 0, h.marshal())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := <-acc
	if r == nil {
		t.Fatal("accept failed")
	}
	defer r.Close()
	got := make([]byte, 10)
	q := nettest.Recv(t, r, [][]byte{got}, []uint64{1})
	nettest.AwaitOK(t, nettest.Send(t, s, nettest.Pattern(1, 10), 1), "send")
	nettest.AwaitOK(t, q, "recv")
	// Idle for three timeouts with a receive posted: heartbeats alone keep
	// the connection up.
	qr := nettest.Recv(t, r, [][]byte{make([]byte, 8<<20)}, []uint64{3})
	time.Sleep(3 * timeout)
	if done, _, err := qr.Test(); done {
		t.Fatalf("idle connection failed after %v: %v", 3*timeout, err)
	}
	start := time.Now()
	px.freeze()
	qs := nettest.Send(t, s, nettest.Pattern(2, 8<<20), 3)
	for _, c := range []struct {
		what string
		q    fnet.Request
	}{{"recv", qr}, {"send", qs}} {
		_, err := nettest.Await(t, c.q, c.what)
		if err == nil || !isPeerLost(err) {
			t.Fatalf("%s on a silent connection: error %v, want ErrPeerLost", c.what, err)
		}
		t.Logf("%s failed after %v: %v", c.what, time.Since(start).Round(time.Millisecond), err)
	}
	if el := time.Since(start); el > 10*timeout {
		t.Fatalf("silence detected after %v with a timeout of %v", el, timeout)
	}
}

func TestThroughput(t *testing.T) {
	p1, p2 := open(Options{})(t), open(Options{})(t)
	defer p1.Close()
	defer p2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bps, err := nettest.Throughput(ctx, p1, p2, 1<<20, 16)
	if err != nil || bps <= 0 {
		t.Fatalf("Throughput: %v B/s, %v", bps, err)
	}
	if _, err := nettest.Throughput(ctx, p1, p2, 0, 1); err == nil {
		t.Error("Throughput of 0-byte messages succeeded")
	}
	p2.Close()
	if _, err := nettest.Throughput(ctx, p1, p2, 1<<20, 1); err == nil {
		t.Error("Throughput to a closed provider succeeded")
	}
}

// TestDefaultDevice connects over the first device the default filter
// picks (a real interface where the host has one, not loopback).
func TestDefaultDevice(t *testing.T) {
	p1, err1 := New(Options{})
	p2, err2 := New(Options{})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	defer p1.Close()
	defer p2.Close()
	t.Logf("devices: %+v", p1.Devices())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bps, err := nettest.Throughput(ctx, p1, p2, 256<<10, 8)
	if err != nil || bps <= 0 {
		t.Fatalf("over %s: %v B/s, %v", p1.Devices()[0].Name, bps, err)
	}
}
