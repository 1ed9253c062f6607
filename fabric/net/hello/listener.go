package hello

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/fabric/net"
)

// Listener is a Layer's listener: it hands over only connections that
// proved the job secret.
type Listener struct {
	l     net.Listener
	layer *Layer
}

// Handle is the listener's handle (net.Listener.Handle).
func (x *Listener) Handle() []byte { return x.l.Handle() }

// Close stops listening; connections handed over stay open.
func (x *Listener) Close() error { return x.l.Close() }

// judge receives r's hello and confirmation.
func (x *Listener) judge(ctx context.Context, r net.RecvConn, want func(Hello) error) (Hello, error) {
	return x.layer.o.Receive(ctx, r, x.l.Handle(), x.layer.o.Wait, want)
}

// drop counts r as dropped, then aborts it (so its dialer learns of the
// drop only once it is counted) and closes it.
func (x *Listener) drop(r net.RecvConn, why error) {
	x.layer.o.Drops.Drop(why)
	r.Abort(fmt.Errorf("dropped: %w", why))
	r.Close()
}

// Serve takes connections until ctx ends or the listener fails (Close),
// and returns that error once every connection it took is handed over or
// dropped. Each connection's hello is awaited on its own, for at most the
// layer's Wait; a connection whose hello proves the secret and passes want
// (nil: any) is given to take, which owns it when it returns nil. A
// connection take refuses (an error: a second connection from one peer)
// is dropped like a foreign one.
func (x *Listener) Serve(ctx context.Context, want func(Hello) error, take func(net.RecvConn, Hello) error) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r, err := x.l.Accept(ctx)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := x.judge(ctx, r, want)
			if err == nil {
				err = take(r, h)
			}
			if err != nil {
				x.drop(r, err)
			}
		}()
	}
}

// Accept takes connections until one's hello proves the secret and passes
// want (nil: any); it returns that connection and its hello. Every other
// connection it took is dropped before it returns, those whose hello was
// still awaited included. The hellos of connections that arrive together
// are awaited side by side. Accept returns an error only when ctx ends or
// the listener fails.
func (x *Listener) Accept(ctx context.Context, want func(Hello) error) (net.RecvConn, Hello, error) {
	// Every connection taken here is reported before Accept returns:
	// cancel ends the hellos still awaited, then judging is waited for.
	var judging sync.WaitGroup
	defer judging.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		r   net.RecvConn
		h   Hello
		err error
	}
	got := make(chan result)
	conns := make(chan net.RecvConn)
	failed := make(chan error, 1)
	go func() {
		for {
			r, err := x.l.Accept(ctx)
			if err != nil {
				failed <- err
				return
			}
			select {
			case conns <- r:
			case <-ctx.Done():
				x.drop(r, errors.New("taken while the listener's peer was found: not heard"))
				failed <- ctx.Err()
				return
			}
		}
	}()
	for {
		select {
		case r := <-conns:
			judging.Add(1)
			go func() {
				defer judging.Done()
				h, err := x.judge(ctx, r, want)
				select {
				case got <- result{r, h, err}:
				case <-ctx.Done(): // Accept is returning: not the one
					if err == nil {
						err = errors.New("another connection to this listener proved itself first")
					}
					x.drop(r, err)
				}
			}()
		case res := <-got:
			if res.err == nil {
				return res.r, res.h, nil
			}
			x.drop(res.r, res.err)
		case err := <-failed:
			return nil, Hello{}, err
		}
	}
}
