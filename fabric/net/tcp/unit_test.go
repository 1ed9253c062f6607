package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
	"github.com/flexlink/flexlink/internal/errs"
)

func isPeerLost(err error) bool { return errors.Is(err, errs.ErrPeerLost) }

func TestChooseIfaces(t *testing.T) {
	a := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	ifs := []iface{
		{name: "lo", up: true, loopback: true, addrs: a("127.0.0.1")},
		{name: "eth0", up: true, addrs: a("10.0.0.1")},
		{name: "eth1", up: true, addrs: a("10.1.0.1")},
		{name: "ib0", up: true, addrs: a("10.2.0.1")},
		{name: "eth2", up: false, addrs: a("10.3.0.1")},
		{name: "eth3", up: true, addrs: a("fd00::3")}, // no IPv4
		{name: "docker0", up: true, addrs: a("172.17.0.1")},
	}
	for _, c := range []struct {
		spec string
		ifs  []iface
		want string // names, comma-separated; "!" for an error
	}{
		{"", ifs, "eth0,eth1,ib0,docker0"},
		{"eth", ifs, "eth0,eth1"},
		{"^docker,lo", ifs, "eth0,eth1,ib0"},
		{"=eth1", ifs, "eth1"},
		{"=eth", ifs, "!"}, // exact: no interface is called "eth", and lo does not pass
		{"lo", ifs, "lo"},
		{"lo,ib", ifs, "lo,ib0"},
		{"^eth,ib,docker", ifs, "lo"},
		{"^=eth0", ifs, "eth1,ib0,docker0"},
		{"", ifs[:1], "lo"},
		{"^lo", ifs[:1], "!"},
		{"eth2", ifs, "!"},
		{"eth3", ifs, "!"},
	} {
		got, err := chooseIfaces(c.spec, c.ifs)
		var names []string
		for _, f := range got {
			names = append(names, f.name)
		}
		s := strings.Join(names, ",")
		if err != nil {
			s = "!"
		}
		if s != c.want {
			t.Errorf("filter %q: got %q (err %v), want %q", c.spec, s, err, c.want)
		}
	}
}

func TestSysfs(t *testing.T) {
	root := t.TempDir()
	pci := filepath.Join(root, "devices", "0000:3b:00.0")
	for _, d := range []string{filepath.Join(root, "eth0"), filepath.Join(root, "lo"), pci} {
		os.MkdirAll(d, 0o755)
	}
	os.Symlink(pci, filepath.Join(root, "eth0", "device"))
	os.WriteFile(filepath.Join(root, "eth0", "speed"), []byte("25000\n"), 0o644)
	os.WriteFile(filepath.Join(root, "lo", "speed"), []byte("-1\n"), 0o644)
	p, sp := sysfs(root, "eth0")
	if want, _ := filepath.EvalSymlinks(pci); p != want || sp != 25000*125e3 {
		t.Errorf("eth0: pci %q speed %v, want %q and %v", p, sp, want, 25000*125e3)
	}
	if p, sp := sysfs(root, "lo"); p != "" || sp != 0 {
		t.Errorf("lo: pci %q speed %v, want none", p, sp)
	}
}

func TestDevicesFromOptions(t *testing.T) {
	p, err := New(Options{IfName: "eth", ifaces: []iface{
		{name: "lo", up: true, loopback: true, addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{name: "eth0", up: true, addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}},
	}, sysfs: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Devices()
	if len(d) != 1 || d[0].Name != "eth0" || d[0].MaxRecvs != fnet.MaxRecvs || d[0].Ptr != fnet.MemHost {
		t.Fatalf("devices %+v", d)
	}
	if _, err := New(Options{Sockets: maxSockets + 1}); err == nil {
		t.Error("New accepted too many sockets")
	}
}

func TestHandleRoundTrip(t *testing.T) {
	for _, a := range []string{"127.0.0.1:4000", "[fd00::1]:65535"} {
		h := handle{addr: netip.MustParseAddrPort(a)}
		rand(h.nonce[:])
		b := h.marshal()
		if len(b) > fnet.MaxHandleBytes {
			t.Fatalf("handle of %d bytes", len(b))
		}
		got, err := parseHandle(b)
		if err != nil || got != h {
			t.Fatalf("%s: parsed %+v, %v; want %+v", a, got, err, h)
		}
		for i := range b { // every single-byte change in the fixed part is caught
			if i >= 8 && i < 24 {
				continue // nonce: any value is well formed
			}
			c := slices.Clone(b)
			c[i] ^= 0xff
			if g, err := parseHandle(c); err == nil && g.addr == h.addr {
				t.Errorf("%s: byte %d flipped, still parsed as the same address", a, i)
			}
		}
	}
}

func TestHeaderBounds(t *testing.T) {
	for _, c := range []struct {
		h       header
		forward bool
		ok      bool
	}{
		{header{kind: kindData, total: 10, off: 0, length: 10}, true, true},
		{header{kind: kindData, total: 0, length: 0}, true, true},
		{header{kind: kindData, total: 10, off: 5, length: 6}, true, false},
		{header{kind: kindData, total: 10, off: 11}, true, false},
		{header{kind: kindData, total: 10, length: 0}, true, false},
		{header{kind: kindData, total: maxMessage + 1, length: 1}, true, false},
		{header{kind: kindData, total: 10, length: 10}, false, false},
		{header{kind: kindAck, seq: 3}, false, true},
		{header{kind: kindAck, seq: 3}, true, false},
		{header{kind: kindAbort, length: maxReason}, true, true},
		{header{kind: kindAbort, length: maxReason + 1}, false, false},
		{header{kind: 9}, true, false},
	} {
		var b [hdrBytes]byte
		c.h.put(b[:])
		_, err := parseHeader(b[:], c.forward)
		if (err == nil) != c.ok {
			t.Errorf("%+v forward=%v: error %v, want ok=%v", c.h, c.forward, err, c.ok)
		}
	}
}

func TestParts(t *testing.T) {
	for _, c := range []struct {
		seq, n    uint64
		k         int
		wantParts int
	}{{0, 0, 3, 1}, {4, 100, 3, 1}, {0, 1 << 20, 1, 1}, {1, 1 << 20, 3, 3}, {2, 65536, 4, 4}, {0, 65536 + 1, 64, 17}} {
		sp := parts(c.seq, c.n, c.k, 65536)
		covered, used := uint64(0), 0
		for _, s := range sp {
			if s.used {
				used++
				covered += s.len
			}
		}
		if used != c.wantParts || covered != c.n {
			t.Errorf("%+v: %d parts covering %d bytes, want %d covering %d", c, used, covered, c.wantParts, c.n)
		}
	}
}

// proxy forwards one listener's connections until frozen, then holds
// every socket open without moving a byte (a cut cable).
type proxy struct {
	addr   netip.AddrPort
	mu     sync.Mutex
	frozen bool
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	go func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				a.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, a, b)
			cmu.Unlock()
			go p.pipe(a, b)
			go p.pipe(b, a)
		}
	}()
	return p
}

func (p *proxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		frozen := p.frozen
		p.mu.Unlock()
		if frozen {
			io.Copy(io.Discard, src) // swallow everything, forward nothing
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestDialRefusedIsPeerLost: Connect to a handle whose listener is gone
// fails with errs.ErrPeerLost.
func TestDialRefusedIsPeerLost(t *testing.T) {
	p, l := listenLo(t)
	h := l.Handle()
	l.Close()
	if _, err := connect5s(p, h); !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("Connect to a closed listener: %v, want an error wrapping ErrPeerLost", err)
	}
}

// TestListenerClosedBeforeAnswerIsPeerLost: a listener that closes the
// socket without answering the hello (here: it refuses a wrong nonce, as
// it closes a stale handle's; a listener whose process dies looks the
// same to the dialer) fails Connect with errs.ErrPeerLost.
func TestListenerClosedBeforeAnswerIsPeerLost(t *testing.T) {
	p, l := listenLo(t)
	h := l.Handle()
	h[8] ^= 0xff // the nonce's first byte (after magic, version, family and port)
	_, err := connect5s(p, h)
	if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "closed the connection before answering") {
		t.Fatalf("Connect with a wrong nonce: %v, want the listener's close, wrapping ErrPeerLost", err)
	}
}

// listenLo is a provider on the loopback (open's) and a listener of it,
// both closed when the test ends.
func listenLo(t *testing.T) (fnet.Provider, fnet.Listener) {
	t.Helper()
	p := open(Options{Timeout: time.Second})(t)
	t.Cleanup(func() { p.Close() })
	l, err := p.Listen(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return p, l
}

// connect5s connects p's device 0 to handle h within 5 s.
func connect5s(p fnet.Provider, h []byte) (fnet.SendConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Connect(ctx, 0, h)
}

// TestCloseRightAfterLastRecv: a receiver that closes right after its last
// receive, while its ack writer is in the middle of a frame (held here),
// still acknowledges that message: the send succeeds. (Closing without
// waiting for the writer lost the ack, and the sender failed a delivered
// message with "connection closed by peer".)
func TestCloseRightAfterLastRecv(t *testing.T) {
	pa := open(Options{Timeout: 5 * time.Second})(t)
	pb := open(Options{Timeout: 5 * time.Second})(t)
	t.Cleanup(func() { pa.Close(); pb.Close() })
	s, r, err := nettest.Connect(context.Background(), pa, pb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := r.(*recvConn)
	rc.lockW() // the ack writer's frame in progress
	got := make([]byte, 8)
	q := nettest.Recv(t, r, [][]byte{got}, []uint64{7})
	qs := nettest.Send(t, s, nettest.Pattern(7, 8), 7)
	nettest.AwaitOK(t, q, "recv")
	closed, waiting := make(chan struct{}), make(chan struct{})
	rc.waitingW = func() { close(waiting) }
	go func() { r.Close(); close(closed) }()
	<-waiting // Close has failed the connection and now waits for the frame
	rc.unlockW()
	if _, err := nettest.Await(t, qs, "send"); err != nil {
		t.Fatalf("send whose message the receiver took before closing: %v, want success", err)
	}
	<-closed
}
