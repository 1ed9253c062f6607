package proxy

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/hello"
)

// Directory publishes and looks up listen handles out of band (the
// bootstrap store's Put and Get).
type Directory interface {
	Put(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// Network tags of the proxy's connections. The messages of all-to-all
// and group connections are tagged with their original sender's rank;
// these two take the top of 20 bits, the narrowest provider's tag width
// (ucx; New checks the provider's through the connection layer,
// fabric/net/hello: net.CheckTags), so communicators hold
// fewer than maxRanks ranks.
const (
	// helloTag marks the first message of a proxy connection and the
	// confirmation after it (fabric/net/hello): the sender's rank and its
	// proof of the job secret (hello.go), so the receiver knows whose
	// connection it accepted and that it belongs to the job.
	helloTag = 1<<20 - 1
	// ctsTag marks a destination's clear-to-send (cts.go).
	ctsTag   = 1<<20 - 2
	maxRanks = 1<<20 - 2
	// maxTag is the largest tag of a proxy connection.
	maxTag = helloTag
)

// conns holds one proxy's network connections, made through the
// connection layer (fabric/net/hello): a listener on its own NIC whose
// handle is published as key(rank), sending connections opened on first
// use from its own NIC, and the receiving connections the listener hands
// over, keyed by what the proved hello names: the connecting proxy's rank
// and the connection's kind. Accepted clear-to-send connections are also
// announced on cts, for the group service to read.
type conns struct {
	layer *hello.Layer
	l     *hello.Listener
	rank  int
	key   func(rank int) string
	dir   Directory
	size  int                // ranks in the communicator
	stop  context.CancelFunc // ends the listener's hellos still awaited (close, abort)

	mu      sync.Mutex
	changed chan struct{}            // closed and replaced when recv gains a connection or err is set
	send    map[peerKey]net.SendConn // keyed by (destination, kind)
	recv    map[peerKey]net.RecvConn
	cts     chan peerKey // accepted clear-to-send connections (each key once)
	err     error
}

// openConns listens through layer, publishes the handle and takes the
// connections the listener hands over until it is closed.
func openConns(ctx context.Context, layer *hello.Layer, rank, size int, key func(int) string, dir Directory) (*conns, error) {
	l, err := layer.Listen(ctx)
	if err != nil {
		return nil, fmt.Errorf("rank %d proxy: %w", rank, err)
	}
	if err := dir.Put(ctx, key(rank), l.Handle()); err != nil {
		l.Close()
		return nil, fmt.Errorf("rank %d proxy: publish handle: %w", rank, err)
	}
	serve, stop := context.WithCancel(context.Background())
	c := &conns{layer: layer, l: l, rank: rank, key: key, dir: dir, size: size, stop: stop,
		changed: make(chan struct{}), send: map[peerKey]net.SendConn{}, recv: map[peerKey]net.RecvConn{}, cts: make(chan peerKey, size)}
	go func() {
		err := l.Serve(serve, func(h hello.Hello) error { _, err := peerOf(h, size); return err }, c.take)
		c.fail(fmt.Errorf("rank %d proxy: accept: %w", rank, err))
	}()
	return c, nil
}

// take files a connection whose hello proved the secret and named a
// member: the first of each key is kept, a later one closed.
func (c *conns) take(rc net.RecvConn, h hello.Hello) error {
	peer, err := peerOf(h, c.size)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.recv[peer]; old != nil || c.err != nil {
		rc.Close()
		return nil
	}
	c.recv[peer] = rc
	close(c.changed)
	c.changed = make(chan struct{})
	if peer.Kind == connCTS {
		c.cts <- peer // one per rank at most: never blocks
	}
	return nil
}

func (c *conns) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.changed)
		c.changed = make(chan struct{})
	}
}

// to returns the sending connection of kind to peer's proxy, connecting
// (and saying hello) on first use.
func (c *conns) to(ctx context.Context, peer int, kind connKind) (net.SendConn, error) {
	key := peerKey{From: peer, Kind: kind}
	c.mu.Lock()
	sc, err := c.send[key], c.err
	c.mu.Unlock()
	if sc != nil || err != nil {
		return sc, err
	}
	h, err := c.dir.Get(ctx, c.key(peer))
	if err != nil {
		return nil, fmt.Errorf("rank %d proxy: handle of rank %d: %w", c.rank, peer, err)
	}
	sc, confirmed, err := c.layer.Dial(ctx, h, hello.Hello{From: c.rank, To: -1, Extra: kindBytes(kind)})
	if err == nil {
		if _, err = confirmed.Wait(ctx); err != nil {
			sc.Abort(err)
			err = fmt.Errorf("hello refused (wrong job secret or communicator?): %w", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("rank %d proxy: %s connection to rank %d: %w", c.rank, kind, peer, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		sc.Abort(c.err)
		return nil, c.err
	}
	if old := c.send[key]; old != nil {
		sc.Close()
		return old, nil
	}
	c.send[key] = sc
	return sc, nil
}

// ready returns the receiving connection k if it is there, else nil.
func (c *conns) ready(k peerKey) net.RecvConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil // from reports it
	}
	return c.recv[k]
}

// from waits for the receiving connection k.
func (c *conns) from(ctx context.Context, k peerKey) (net.RecvConn, error) {
	for {
		c.mu.Lock()
		rc, err, ch := c.recv[k], c.err, c.changed
		c.mu.Unlock()
		if rc != nil || err != nil {
			return rc, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("rank %d proxy: waiting for the %s connection from rank %d: %w", c.rank, k.Kind, k.From, context.Cause(ctx))
		}
	}
}

// abort fails every connection with err and closes the listener.
func (c *conns) abort(err error) {
	c.fail(err)
	c.stop()
	c.l.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sc := range c.send {
		sc.Abort(err)
	}
	for _, rc := range c.recv {
		rc.Abort(err)
	}
}

// close closes every connection and the listener.
func (c *conns) close() {
	c.stop()
	c.l.Close()
	c.layer.Drops().Stop() // the drops not yet warned about
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sc := range c.send {
		sc.Close()
	}
	for _, rc := range c.recv {
		rc.Close()
	}
	if c.err == nil {
		c.err = fmt.Errorf("rank %d proxy closed", c.rank)
		close(c.changed)
	}
}

func rankKey(prefix string) func(int) string {
	return func(r int) string { return prefix + strconv.Itoa(r) }
}
