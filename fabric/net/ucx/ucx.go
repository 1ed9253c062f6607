// Package ucx is the UCX provider of flexlink/fabric/net: tagged messages
// over UCX's UCP layer (libucp.so.0, loaded at run time with purego; no
// cgo). UCX picks its transports itself (UCX_TLS, UCX_NET_DEVICES and the
// other UCX_* variables are honoured as UCX documents them, never
// overridden): verbs where an RDMA NIC exists, shared memory or tcp
// otherwise. docs/UCX.md has the whole story.
//
// # Structure
//
// One UCP context and one worker per Provider. The worker is
// single-threaded (UCS_THREAD_MODE_SINGLE), so one goroutine locked to its
// OS thread makes every UCX call: it progresses the worker and polls
// requests with ucp_request_check_status (no UCX callbacks run Go code).
// ISend, IRecv, Abort and Close hand it closures; Request.Test reads a
// result the loop publishes atomically.
//
// # Handles: a TCP side channel
//
// A UCP worker address is 100–300 bytes, over the 128-byte handle limit, so
// the handle carries the IP:port of a small TCP listener and a random nonce
// (32 bytes at most). Connect dials it, the listener answers with its
// worker address and a connection id, and the connector creates a UCP
// endpoint to that address. The TCP connection then stays open as the
// control channel: it carries the abort and close notices, and its end (or
// TCP keepalive, about 10 s) tells a side that its peer is gone, so
// requests fail instead of hanging. ucp_listener_create with a sockaddr was
// the alternative; it needs UCX's sockaddr transports (rdmacm or tcp
// sockcm) to be enabled by UCX_TLS, and it still leaves the receiver
// without a liveness signal for a sender it has no endpoint to, so the
// side channel is the more robust choice.
//
// # Tags
//
// A UCP tag is 64 bits: the receiver-assigned connection id (32 bits), a
// message sequence number modulo 4096 (12 bits) and the user's tag (20
// bits, so user tags are limited to MaxUserTag; larger ones are rejected).
// The sequence number makes matching exact: message k of a connection can
// only land in the receive slot the receiver assigned to message k, so an
// IRecv of n buffers takes exactly the next n messages in send order,
// whatever their tags, as the interface requires. One-buffer receives are
// posted with ucp_tag_recv_nbx on (id, seq) with the user bits masked
// out, and the user tag is checked on completion; multi-receives probe for
// their sequence numbers (ucp_tag_probe_nb) and receive each message into
// the buffer of its tag (ucp_tag_msg_recv_nbx). Sequence numbers wrap, so
// at most 4096 received messages may be outstanding on one connection.
//
// # Completion
//
// Sends are synchronous tagged sends (ucp_tag_send_sync_nbx): a send
// completes once the receiver has matched it, as the interface promises,
// not when the buffer could merely be reused.
//
// # Memory
//
// Buffers handed to ISend/IRecv are passed to UCX by address and may be
// read or written until the request completes; the provider keeps a
// reference to them until UCX is done (Go's heap does not move objects),
// even after an Abort has failed the request. Memory from AllocHost
// (mmap'd, outside the Go heap) registered with RegMr avoids both Go-heap
// pinning questions and UCX's per-call registration.
package ucx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/ucx/internal/ucp"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
)

// Options configure Open. The zero value is the usual choice.
type Options struct {
	// Library is the UCP library to load (default libucp.so.0).
	Library string
	// Env is where UCX_NET_DEVICES is read to filter the devices, and
	// FLEXLINK_PORT_RANGE for the side channel's listeners (default:
	// the process environment; UCX itself always reads the process
	// environment).
	Env settings.Env
}

// Provider is the UCX network provider. It implements fnet.Provider.
type Provider struct {
	lib   *ucp.Lib
	e     *engine
	addr  []byte // worker address
	devs  []device
	host  string
	ports ports.Range // the side channel's listeners' (FLEXLINK_PORT_RANGE)

	nextID atomic.Uint32

	mu        sync.Mutex
	listeners map[*listener]struct{}
	closed    bool

	// Owned by the engine loop.
	sends map[*sendConn]struct{}
	recvs map[*recvConn]struct{}
}

// Open loads libucp, creates the context and worker and starts the progress
// goroutine. Without the library the error wraps errs.ErrNotSupported and
// keeps dlopen's message.
func Open(opts Options) (*Provider, error) {
	env := opts.Env
	if env == nil {
		env = settings.OS()
	}
	pr, err := env.Ports() // the side channel's listeners take FLEXLINK_PORT_RANGE's ports
	if err != nil {
		return nil, fmt.Errorf("net ucx: %w", err)
	}
	lib, err := ucp.Load(opts.Library)
	if err != nil {
		return nil, fmt.Errorf("net ucx: %w", err)
	}
	netDevs, _ := env("UCX_NET_DEVICES")
	devs := listDevices(netDevs)
	if len(devs) == 0 {
		return nil, fmt.Errorf("net ucx: no network interface with an address: %w", errs.ErrNotSupported)
	}
	e, addr, err := startEngine(lib)
	if err != nil {
		return nil, fmt.Errorf("net ucx (UCX %s): %w", lib.Version(), err)
	}
	host, _ := os.Hostname()
	p := &Provider{
		lib: lib, e: e, addr: addr, devs: devs, host: host, ports: pr,
		listeners: map[*listener]struct{}{},
		sends:     map[*sendConn]struct{}{},
		recvs:     map[*recvConn]struct{}{},
	}
	return p, nil
}

func (p *Provider) Name() string { return "ucx" }

// TagBits is UserTagBits: the rest of a UCP tag is the connection id and
// the sequence number (see Tags above).
func (p *Provider) TagBits() int { return UserTagBits }

// Version is the loaded UCX's version string.
func (p *Provider) Version() string { return p.lib.Version() }

// Devices lists the network interfaces the side channel can listen on. The
// data path uses whatever devices UCX selects (UCX_NET_DEVICES).
func (p *Provider) Devices() []fnet.Device {
	out := make([]fnet.Device, len(p.devs))
	for i, d := range p.devs {
		out[i] = d.Device
	}
	return out
}

func (p *Provider) device(dev int) (device, error) {
	if dev < 0 || dev >= len(p.devs) {
		return device{}, fmt.Errorf("net ucx: device %d out of range (%d devices)", dev, len(p.devs))
	}
	return p.devs[dev], nil
}

func (p *Provider) label(d device) string { return p.host + "/" + d.Name }

// Listen opens the side-channel listener on device dev's address.
func (p *Provider) Listen(ctx context.Context, dev int) (fnet.Listener, error) {
	d, err := p.device(dev)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, &fnet.ConnError{Provider: "ucx", Device: d.Name, Remote: "-", Op: "listen", Err: errs.ErrClosed}
	}
	ln, err := p.ports.Listen(ctx, "tcp", d.ip.String())
	if err != nil {
		return nil, &fnet.ConnError{Provider: "ucx", Device: d.Name, Remote: "-", Op: "listen", Err: err}
	}
	port, _ := strconv.Atoi(portOf(ln.Addr()))
	l := &listener{
		p: p, dev: d, ln: ln,
		h:     handle{addr: netip.AddrPortFrom(d.ip, uint16(port)), nonce: newNonce()},
		ready: make(chan *recvConn, 64),
		done:  make(chan struct{}),
	}
	p.listeners[l] = struct{}{}
	go l.acceptLoop()
	return l, nil
}

func portOf(a net.Addr) string {
	_, port, _ := net.SplitHostPort(a.String())
	return port
}

// Close fails every open connection with errs.ErrClosed, closes the
// listeners and releases UCX.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ls := p.listeners
	p.listeners = nil
	p.mu.Unlock()
	for l := range ls {
		l.close()
	}
	var ctrls []net.Conn
	p.e.shutdown(func() {
		for c := range p.sends {
			c.fail(c.errorf(errs.ErrClosed, "provider closed"))
			ctrls = append(ctrls, c.ctl.conn)
		}
		for c := range p.recvs {
			c.fail(c.errorf(errs.ErrClosed, "provider closed"))
			ctrls = append(ctrls, c.ctl.conn)
		}
	})
	for _, c := range ctrls {
		_ = writeFrame(c, frameClose, "provider closed")
		c.Close()
	}
	return nil
}

func isClosed(err error) bool { return errors.Is(err, errs.ErrClosed) }

var _ fnet.Provider = (*Provider)(nil)
