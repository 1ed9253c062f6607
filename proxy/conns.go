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
// (ucx; New checks the provider's: net.CheckTags), so communicators hold
// fewer than maxRanks ranks.
const (
	// helloTag marks the first message of a proxy connection: the
	// sender's rank and its proof of the job secret (hello.go), so the
	// receiver knows whose connection it accepted and that it belongs to
	// the job.
	helloTag = 1<<20 - 1
	// ctsTag marks a destination's clear-to-send (cts.go).
	ctsTag   = 1<<20 - 2
	maxRanks = 1<<20 - 2
	// maxTag is the largest tag of a proxy connection.
	maxTag = helloTag
)

// conns holds one proxy's network connections: a listener on its own NIC
// whose handle is published as key(rank), sending connections opened on
// first use from its own NIC, and the receiving connections its accept
// loop takes, keyed by what the hello names: the connecting proxy's rank
// and the connection's kind. Accepted clear-to-send connections are also
// announced on cts, for the group service to read.
type conns struct {
	nic
	rank  int
	key   func(rank int) string
	dir   Directory
	eng   *Engine
	auth  Auth
	drops *hello.Drops // connections dropped at hello
	size  int          // ranks in the communicator

	mu      sync.Mutex
	changed chan struct{}            // closed and replaced when recv gains a connection or err is set
	send    map[peerKey]net.SendConn // keyed by (destination, kind)
	recv    map[peerKey]net.RecvConn
	cts     chan peerKey // accepted clear-to-send connections (each key once)
	err     error
}

// nic is the proxy's own NIC: its provider, device index and listener.
type nic struct {
	p   net.Provider
	dev int
	l   net.Listener
}

func openConns(ctx context.Context, p net.Provider, dev, rank, size int, auth Auth, key func(int) string, dir Directory, eng *Engine) (*conns, error) {
	l, err := p.Listen(ctx, dev)
	if err != nil {
		return nil, fmt.Errorf("rank %d proxy: listen on %s: %w", rank, p.Devices()[dev].Name, err)
	}
	if err := dir.Put(ctx, key(rank), l.Handle()); err != nil {
		l.Close()
		return nil, fmt.Errorf("rank %d proxy: publish handle: %w", rank, err)
	}
	c := &conns{nic: nic{p: p, dev: dev, l: l}, rank: rank, key: key, dir: dir, eng: eng, auth: auth, size: size,
		drops:   &hello.Drops{Log: auth.Log, What: fmt.Sprintf("PXN proxy of rank %d", rank)},
		changed: make(chan struct{}), send: map[peerKey]net.SendConn{}, recv: map[peerKey]net.RecvConn{}, cts: make(chan peerKey, size)}
	go c.accept()
	return c, nil
}

func (c *conns) accept() {
	ctx := context.Background()
	for {
		rc, err := c.l.Accept(ctx)
		if err != nil {
			c.fail(fmt.Errorf("rank %d proxy: accept: %w", c.rank, err))
			return
		}
		go func() {
			hctx, cancel := context.WithTimeout(ctx, helloTimeout)
			defer cancel()
			b := make([]byte, hello.MaxBytes)
			op := c.eng.Post(hctx, func() (net.Request, error) { return rc.IRecv([][]byte{b}, []uint64{helloTag}, nil) })
			n, err := op.Wait(hctx)
			if err != nil {
				rc.Abort(err)
				c.drops.Drop(fmt.Errorf("no proxy hello: %w", err))
				return
			}
			peer, err := c.auth.check(b[:n[0]], c.l.Handle(), c.size)
			if err != nil { // not a member of the job: dropped, the proxy goes on
				rc.Abort(err)
				c.drops.Drop(err)
				return
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if old := c.recv[peer]; old != nil || c.err != nil {
				rc.Close()
				return
			}
			c.recv[peer] = rc
			close(c.changed)
			c.changed = make(chan struct{})
			if peer.Kind == connCTS {
				c.cts <- peer // one per rank at most: never blocks
			}
		}()
	}
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
	sc, err = c.p.Connect(ctx, c.dev, h)
	if err != nil {
		return nil, fmt.Errorf("rank %d proxy: connect to rank %d from %s: %w", c.rank, peer, c.p.Devices()[c.dev].Name, err)
	}
	b := c.auth.hello(peerKey{From: c.rank, Kind: kind}, h)
	op := c.eng.Post(ctx, func() (net.Request, error) { return sc.ISend(b, helloTag, nil) })
	if _, err := op.Wait(ctx); err != nil {
		sc.Abort(err)
		return nil, fmt.Errorf("rank %d proxy: hello to rank %d: %w", c.rank, peer, err)
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
	c.l.Close()
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
