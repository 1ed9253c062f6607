package hello

import (
	"context"
	"fmt"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
)

// Options say what a Layer's connections carry and prove.
type Options struct {
	Config // what the hellos prove, and their tag
	// MaxTag is the largest tag the caller's connections carry (the hello's
	// included): Open refuses a provider whose tags are narrower.
	MaxTag uint64
	// What names the caller and the setting that chose the provider, for
	// that refusal: "netlink (FLEXLINK_NET picks the provider)".
	What string
	// Wait is how long an accepted connection may stay silent before its
	// hello and confirmation (0: DefaultWait).
	Wait time.Duration
	// Drops counts and warns about dropped connections (nil: dropped
	// silently).
	Drops *Drops
}

// Layer is one rank's connections of one kind over one device of a
// network provider. Safe for concurrent use; it owns neither the provider
// nor the listeners and connections it opens.
type Layer struct {
	o   Options
	p   net.Provider
	dev int
}

// Open returns the layer over device dev of p, after checking that p
// carries tags up to o.MaxTag (an error wrapping errs.ErrNotSupported).
func Open(p net.Provider, dev int, o Options) (*Layer, error) {
	if err := net.CheckTags(p, max(o.MaxTag, o.Tag), o.What); err != nil {
		return nil, err
	}
	if n := len(p.Devices()); dev < 0 || dev >= n {
		return nil, fmt.Errorf("%s: device %d, the %s provider has %d", o.What, dev, p.Name(), n)
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	return &Layer{o: o, p: p, dev: dev}, nil
}

// Provider is the layer's provider.
func (l *Layer) Provider() net.Provider { return l.p }

// Device is the layer's device.
func (l *Layer) Device() net.Device { return l.p.Devices()[l.dev] }

// NIC names the layer's device in errors and logs: "tcp lo".
func (l *Layer) NIC() string { return l.p.Name() + " " + l.Device().Name }

// Drops is where the layer's listeners count dropped connections.
func (l *Layer) Drops() *Drops { return l.o.Drops }

// Config is what the layer's hellos prove.
func (l *Layer) Config() Config { return l.o.Config }

// Listen opens a listener on the layer's device. Its handle is published
// to the peers out of band.
func (l *Layer) Listen(ctx context.Context) (*Listener, error) {
	nl, err := l.p.Listen(ctx, l.dev)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", l.NIC(), err)
	}
	return &Listener{l: nl, layer: l}, nil
}

// Dial connects to the listener whose handle is handle and sends h, proved
// for that listener, and the confirmation (Config.Send). It returns the
// sending side, usable at once (later sends follow the hello), and the
// confirmation's request: it completes once the listener took the hello
// and fails when the listener refused it. On error nothing stays open.
func (l *Layer) Dial(ctx context.Context, handle []byte, h Hello) (net.SendConn, net.Request, error) {
	s, err := l.p.Connect(ctx, l.dev, handle)
	if err != nil {
		return nil, nil, fmt.Errorf("connect over %s: %w", l.NIC(), err)
	}
	q, err := l.o.Send(s, h, handle)
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("hello over %s: %w", l.NIC(), err)
	}
	return s, q, nil
}
