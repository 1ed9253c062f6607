// Package tcp is the network transport's pure-Go provider: every connection
// is a few TCP sockets, large messages are striped across them, and data
// moves from the socket straight into the posted buffer.
//
// Each connection has, on the sending side, one writer goroutine per socket
// and one goroutine reading acknowledgements on socket 0; on the receiving
// side, one reader goroutine per socket and one writer of acknowledgements.
// A send completes when the receiver acknowledges the whole message (so
// "done" means the receiver has the data, as the net.SendConn contract
// says). Idle sockets carry heartbeats every fifth of Options.Timeout; a
// socket silent for the whole timeout, a closed socket, or an abort frame
// fails the connection with errs.ErrPeerLost.
package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/ports"
)

// Options configure a provider. The zero value works.
type Options struct {
	// IfName filters interfaces the NCCL_SOCKET_IFNAME way: prefixes,
	// comma-separated; "^" excludes; "=" makes names exact. Loopback is a
	// device only when named here or when no other interface is up.
	IfName string
	// Sockets per connection (1..64; 0: 2). The connecting side decides.
	Sockets int
	// StripeMin is the smallest message striped across the sockets
	// (0: 64 KiB); smaller ones travel whole on one socket.
	StripeMin int
	// Timeout: a peer silent this long (no data, ack or heartbeat) is lost
	// (0: 10 s). Heartbeats go out every fifth of it.
	Timeout time.Duration
	// Logger gets connection events; nil discards them.
	Logger hclog.Logger
	// BindSource binds a connection's sockets to the device's address, so
	// they leave from that NIC even toward another subnet (rails, PXN).
	BindSource bool
	// Ports are the ports listeners take, the first free one in order
	// (FLEXLINK_PORT_RANGE); the zero Range: ephemeral ports.
	Ports ports.Range

	ifaces []iface // tests: instead of the system's
	sysfs  string  // tests: instead of /sys/class/net
}

const (
	defaultSockets   = 2
	defaultStripeMin = 64 << 10
	defaultTimeout   = 10 * time.Second
)

// Provider is the tcp provider. Make one with New.
type Provider struct {
	opt  Options
	devs []fnet.Device
	ips  []netip.Addr
	log  hclog.Logger

	mu     sync.Mutex
	closed bool
	conns  map[closer]struct{} // listeners and connections still open
}

type closer interface{ closeWith(error) }

// New lists the devices and returns a provider.
func New(opt Options) (*Provider, error) {
	if opt.Sockets == 0 {
		opt.Sockets = defaultSockets
	}
	if opt.Sockets < 1 || opt.Sockets > maxSockets {
		return nil, fmt.Errorf("net tcp: %d sockets per connection, want 1..%d", opt.Sockets, maxSockets)
	}
	if opt.StripeMin <= 0 {
		opt.StripeMin = defaultStripeMin
	}
	if opt.Timeout <= 0 {
		opt.Timeout = defaultTimeout
	}
	if opt.sysfs == "" {
		opt.sysfs = "/sys/class/net"
	}
	ifs := opt.ifaces
	if ifs == nil {
		var err error
		if ifs, err = systemIfaces(); err != nil {
			return nil, fmt.Errorf("net tcp: %w", err)
		}
	}
	chosen, err := chooseIfaces(opt.IfName, ifs)
	if err != nil {
		return nil, fmt.Errorf("net tcp: %w", err)
	}
	p := &Provider{opt: opt, log: opt.Logger, conns: map[closer]struct{}{}}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	for _, f := range chosen {
		ip, _ := ipv4(f)
		pci, speed := sysfs(opt.sysfs, f.name)
		p.devs = append(p.devs, fnet.Device{
			Name: f.name, PCIPath: pci, Speed: speed, Ptr: fnet.MemHost,
			MaxRecvs: fnet.MaxRecvs, MaxMessage: maxMessage,
		})
		p.ips = append(p.ips, ip)
	}
	return p, nil
}

func (p *Provider) Name() string { return "tcp" }

// TagBits is 64: a frame header carries the whole tag.
func (p *Provider) TagBits() int { return 64 }

// Devices returns a copy of the device list.
func (p *Provider) Devices() []fnet.Device { return append([]fnet.Device(nil), p.devs...) }

func (p *Provider) device(dev int) error {
	if dev < 0 || dev >= len(p.devs) {
		return fmt.Errorf("net tcp: device %d of %d", dev, len(p.devs))
	}
	return nil
}

// track registers c to be closed with the provider; false once closed.
func (p *Provider) track(c closer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Provider) untrack(c closer) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close closes every listener and connection (pending requests fail with
// errs.ErrClosed).
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	all := make([]closer, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.closeWith(fmt.Errorf("provider closed: %w", errs.ErrClosed))
	}
	return nil
}

func (p *Provider) errClosed() error { return fmt.Errorf("net tcp: provider %w", errs.ErrClosed) }

// RegMr records buf; the tcp provider needs no registration. Only host
// memory is accepted.
func (p *Provider) RegMr(buf []byte, kind fnet.MemKind) (fnet.MemRegion, error) {
	if kind != fnet.MemHost {
		return nil, fmt.Errorf("net tcp: register memory of kind %d: host memory only: %w", kind, errs.ErrNotSupported)
	}
	return region{}, nil
}

type region struct{}

func (region) Deregister() error { return nil }

// Connect dials Options.Sockets sockets to the listener in handle, proves
// on each that it holds the handle's nonce, and returns once the listener
// has answered on all of them.
func (p *Provider) Connect(ctx context.Context, dev int, hb []byte) (fnet.SendConn, error) {
	if err := p.device(dev); err != nil {
		return nil, err
	}
	h, err := parseHandle(hb)
	if err != nil {
		return nil, err
	}
	name := p.devs[dev].Name
	fail := func(err error) error {
		return &fnet.ConnError{Provider: "tcp", Device: name, Remote: h.addr.String(), Op: "connect", Err: err}
	}
	hl := &hello{count: p.opt.Sockets, nonce: h.nonce, device: name}
	rand(hl.conn[:])
	var d net.Dialer // the route picks the interface, as NCCL's socket transport lets it
	if p.opt.BindSource && p.ips[dev].IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: p.ips[dev].AsSlice()}
	}
	socks := make([]*net.TCPConn, 0, hl.count)
	closeAll := func() {
		for _, c := range socks {
			c.Close()
		}
	}
	for i := range hl.count {
		c, err := d.DialContext(ctx, "tcp", h.addr.String())
		if err != nil {
			closeAll()
			return nil, fail(fnet.Unreachable(err))
		}
		tc := c.(*net.TCPConn)
		socks = append(socks, tc)
		hl.index = i
		if err := exchange(ctx, tc, hl.marshal()); err != nil {
			closeAll()
			return nil, fail(fmt.Errorf("socket %d: %w", i, err))
		}
	}
	s := newSendConn(p, name, h.addr.String(), socks)
	if !p.track(s) {
		s.closeWith(p.errClosed())
		return nil, fail(p.errClosed())
	}
	return s, nil
}

// exchange writes the hello and reads the listener's reply, within ctx.
func exchange(ctx context.Context, c *net.TCPConn, hello []byte) error {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(hello); err != nil {
		return fnet.Unreachable(err)
	}
	var reply [len(replyOK)]byte
	if _, err := readFull(c, reply[:]); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The listener closes a socket whose hello it refuses without a
		// word, as the kernel does when the listener's process dies: the
		// dialer cannot tell the two apart. A peer that dies as it is
		// dialed is the likely one in a job whose handles all come from
		// its own exchange, so this is a lost peer, as a dial refused is.
		return fmt.Errorf("the listener closed the connection before answering (its process is gone, or it refused a stale handle or another provider version): %w: %w", err, errs.ErrPeerLost)
	}
	if string(reply[:]) != replyOK {
		return errors.New("listener answered with garbage")
	}
	if !stop() {
		return ctx.Err()
	}
	c.SetDeadline(time.Time{})
	return nil
}

var _ fnet.Provider = (*Provider)(nil)
