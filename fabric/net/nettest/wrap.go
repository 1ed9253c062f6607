package nettest

import (
	"context"

	"github.com/flexlink/flexlink/fabric/net"
)

// Wrapped is Provider with every connection it makes passed through Send
// and every one its listeners accept through Recv: how a test changes
// what a provider's connections do (Narrow; the suite's self-test breaks
// them).
type Wrapped struct {
	net.Provider
	Send func(net.SendConn) net.SendConn
	Recv func(net.RecvConn) net.RecvConn
}

// Connect is Provider's Connect, wrapped by Send.
func (w Wrapped) Connect(ctx context.Context, dev int, handle []byte) (net.SendConn, error) {
	s, err := w.Provider.Connect(ctx, dev, handle)
	if err != nil {
		return nil, err
	}
	return w.Send(s), nil
}

// Listen is Provider's Listen; what the listener accepts is wrapped by
// Recv.
func (w Wrapped) Listen(ctx context.Context, dev int) (net.Listener, error) {
	l, err := w.Provider.Listen(ctx, dev)
	if err != nil {
		return nil, err
	}
	return wrappedListener{l, w.Recv}, nil
}

type wrappedListener struct {
	net.Listener
	recv func(net.RecvConn) net.RecvConn
}

func (l wrappedListener) Accept(ctx context.Context) (net.RecvConn, error) {
	r, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return l.recv(r), nil
}
