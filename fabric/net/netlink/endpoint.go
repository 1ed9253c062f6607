package netlink

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"flexlink/fabric"
	"flexlink/fabric/net"
)

// Endpoint is a fabric.Endpoint over one device of a network provider. Its
// Address is its listener's handle. Connect, called on both ranks of a
// pair, connects to the peer's handle, sends a hello naming this rank as
// the connection's first message, and waits for the peer's connection to
// arrive at this endpoint's listener (matched by the peer's hello).
//
// Peers are authenticated only by the handle (the tcp provider's listener
// nonce): whoever read the address from the bootstrap can connect.
type Endpoint struct {
	p      net.Provider
	dev    int
	rank   int
	l      net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	arrived map[int]chan net.RecvConn // by peer rank
}

const (
	helloTag   = 0x68656c6c6f // "hello"
	helloMagic = 0x4c4e5846   // "FXNL"
	// helloWait bounds how long an accepted connection may take to say
	// who it is.
	helloWait = 10 * time.Second
)

// NewEndpoint listens on device dev of p for rank's links.
func NewEndpoint(p net.Provider, dev, rank int) (*Endpoint, error) {
	ctx, cancel := context.WithCancel(context.Background())
	l, err := p.Listen(ctx, dev)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("net endpoint of rank %d: %w", rank, err)
	}
	e := &Endpoint{p: p, dev: dev, rank: rank, l: l, ctx: ctx, cancel: cancel, arrived: map[int]chan net.RecvConn{}}
	e.wg.Add(1)
	go e.accept()
	return e, nil
}

func (e *Endpoint) Kind() fabric.Kind { return fabric.KindNet }
func (e *Endpoint) Address() []byte   { return e.l.Handle() }

func (e *Endpoint) slot(peer int) chan net.RecvConn {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.arrived[peer]
	if c == nil {
		c = make(chan net.RecvConn, 1)
		e.arrived[peer] = c
	}
	return c
}

// accept takes connections and files each under the rank its hello names.
func (e *Endpoint) accept() {
	defer e.wg.Done()
	for {
		r, err := e.l.Accept(e.ctx)
		if err != nil {
			return
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			hello := make([]byte, 8)
			ctx, cancel := context.WithTimeout(e.ctx, helloWait)
			defer cancel()
			q, err := r.IRecv([][]byte{hello}, []uint64{helloTag}, nil)
			if err == nil {
				_, err = q.Wait(ctx)
			}
			if err != nil || binary.LittleEndian.Uint32(hello) != helloMagic {
				r.Close()
				return
			}
			select {
			case e.slot(int(binary.LittleEndian.Uint32(hello[4:]))) <- r:
			default:
				r.Close() // a second connection from one peer
			}
		}()
	}
}

// Connect makes the link to peer: this rank's connection to the peer's
// address, and the peer's connection to this endpoint.
func (e *Endpoint) Connect(ctx context.Context, peer int, addr []byte) (fabric.Link, error) {
	fail := func(err error) (fabric.Link, error) {
		return nil, fmt.Errorf("net link from rank %d to rank %d: %w", e.rank, peer, err)
	}
	s, err := e.p.Connect(ctx, e.dev, addr)
	if err != nil {
		return fail(err)
	}
	hello := make([]byte, 8)
	binary.LittleEndian.PutUint32(hello, helloMagic)
	binary.LittleEndian.PutUint32(hello[4:], uint32(e.rank))
	if _, err := s.ISend(hello, helloTag, nil); err != nil {
		s.Close()
		return fail(err)
	}
	select {
	case r := <-e.slot(peer):
		dev := e.p.Devices()[e.dev]
		return New(peer, s, r, fabric.Props{
			Bandwidth: dev.Speed, Latency: dev.Latency,
			Desc: fmt.Sprintf("net %s %s rank %d <-> rank %d", e.p.Name(), dev.Name, e.rank, peer),
		}), nil
	case <-ctx.Done():
		s.Close()
		return fail(fabric.CtxErr(ctx))
	}
}

// Close stops listening. Links already made stay.
func (e *Endpoint) Close() error {
	e.cancel()
	err := e.l.Close()
	e.wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.arrived {
		select {
		case r := <-c:
			r.Close()
		default:
		}
	}
	return err
}

var _ fabric.Endpoint = (*Endpoint)(nil)
