package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/hello"
)

// Local is the rank's links to the other ranks of its host (shm for host
// buffers): FIFO per peer, the receiver checks tags.
type Local interface {
	Send(peer int, tag fabric.Tag, b []byte) fabric.Request
	Recv(peer int, tag fabric.Tag, b []byte) fabric.Request
}

// Config describes one communicator's proxy.
type Config struct {
	Rank  int
	Hosts []string // comm rank -> host name
	// Via returns the local rank of src's host that sends src's messages
	// for dst (src itself when it sends directly); only asked for pairs on
	// different hosts. It must be the same function on every rank.
	Via      func(src, dst int) int
	Local    Local
	Provider net.Provider
	Dev      int       // this rank's own NIC, an index into Provider.Devices()
	Dir      Directory // where listen handles are published
	Key      string    // prefix of the handles' keys (unique per communicator)
	Chunk    int       // bytes per relayed network message (default 1 MiB)
	Credits  int       // staging slots per (sender, destination host) on a relay (default 4)
	MaxRecvs int       // buffers per multi-receive (default: the device's, at most 8)
	Auth     Auth      // proves the job secret on connections (Auth.Key is set from Key)
}

// Proxy follows PXN routes for one communicator: it sends this rank's
// messages and those local ranks hand it, and receives through
// multi-receives, all on its Engine.
type Proxy struct {
	cfg     Config
	eng     *Engine
	conns   *conns
	credits *Credits
	seq     atomic.Uint64
	total   Stats
	stage   sync.Pool
	svc     *service // the group service (Serve), or nil
	mu      sync.Mutex
	err     error
}

// New starts the proxy: its engine, and a listener on its NIC whose
// handle it publishes.
func New(ctx context.Context, cfg Config) (*Proxy, error) {
	if cfg.Chunk <= 0 {
		cfg.Chunk = 1 << 20
	}
	if cfg.Credits <= 0 {
		cfg.Credits = 4
	}
	if len(cfg.Hosts) > maxRanks {
		return nil, fmt.Errorf("rank %d proxy: %d ranks, more than the %d its network tags name", cfg.Rank, len(cfg.Hosts), maxRanks)
	}
	if len(cfg.Auth.Secret) == 0 {
		return nil, fmt.Errorf("rank %d proxy: no job secret (its connections must prove it)", cfg.Rank)
	}
	a := Auth{Secret: cfg.Auth.Secret, JobID: cfg.Auth.JobID, Key: cfg.Key, Log: cfg.Auth.Log}
	layer, err := hello.Open(cfg.Provider, cfg.Dev, hello.Options{Config: a.config(), MaxTag: maxTag,
		What: "the PXN proxy (FLEXLINK_PXN; FLEXLINK_NET picks the provider)", Wait: helloTimeout,
		Drops: &hello.Drops{Log: a.Log, What: fmt.Sprintf("PXN proxy of rank %d", cfg.Rank)}})
	if err != nil {
		return nil, fmt.Errorf("rank %d proxy: %w", cfg.Rank, err)
	}
	devs := cfg.Provider.Devices()
	if mm := devs[cfg.Dev].MaxMessage; mm > 1 && int64(cfg.Chunk) >= mm {
		cfg.Chunk = int(mm - 1) // room for a group stream's mismatch mark (stream.go)
	}
	if m := min(devs[cfg.Dev].MaxRecvs, 8); cfg.MaxRecvs <= 0 || cfg.MaxRecvs > m {
		cfg.MaxRecvs = max(m, 1)
	}
	p := &Proxy{cfg: cfg, eng: NewEngine(cfg.Rank, 1), credits: NewCredits(cfg.Credits)}
	p.stage.New = func() any { b := make([]byte, cfg.Chunk); return &b }
	if p.conns, err = openConns(ctx, layer, cfg.Rank, len(cfg.Hosts), rankKey(cfg.Key), cfg.Dir); err != nil {
		p.eng.Close()
		return nil, err
	}
	return p, nil
}

// NIC is the name of the proxy's own NIC.
func (p *Proxy) NIC() string { return p.cfg.Provider.Devices()[p.cfg.Dev].Name }

// Abort fails everything queued and in flight, and every later call, with
// err (it should name the rank that caused it).
func (p *Proxy) Abort(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	sv := p.svc
	p.mu.Unlock()
	if sv != nil { // its senders waiting for credits, readers, writers
		sv.cancel(err)
	}
	p.credits.Abort(err)
	p.conns.abort(err)
	p.eng.Abort(err)
}

// Close stops the group service and releases the engine and the
// connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	sv := p.svc
	p.mu.Unlock()
	if sv != nil {
		sv.close()
	}
	p.eng.Close()
	p.conns.close()
}

// Totals returns the counters summed over every call so far.
func (p *Proxy) Totals() Stats { s := p.total.snapshot(); s.NIC = p.NIC(); return s }

// Tag kinds of the local (shm) messages of a call.
const (
	tagDirect = 0x70786e01 + iota // a block for a local peer
	tagSizes                      // a sender's lengths for the messages it hands a relay
	tagData                       // one chunk of a message handed to a relay
)

func localTag(kind, seq uint64, d, k int) fabric.Tag {
	return fabric.Tag{kind, seq, uint64(d), uint64(k)}
}

// chunks is the number of network messages a message of n bytes takes.
func (p *Proxy) chunks(n int) int { return (n + p.cfg.Chunk - 1) / p.cfg.Chunk }

func (p *Proxy) chunk(b []byte, k int) []byte {
	lo := k * p.cfg.Chunk
	return b[lo:min(len(b), lo+p.cfg.Chunk)]
}

// AllToAllv exchanges send[d] (the bytes for rank d) and recv[s] (the
// buffer for rank s's bytes, of exactly their length) with every rank,
// following the routes: local peers directly over Local, ranks on other
// hosts through the relay Via names, whose proxy sends from its NIC, and
// received through multi-receives of up to MaxRecvs buffers. Every rank
// of the communicator calls it, in the same order. A zero length means no
// message (both sides must agree). It returns this call's counters.
func (p *Proxy) AllToAllv(ctx context.Context, send, recv [][]byte) (Stats, error) {
	return p.allToAllv(ctx, send, recv, nil)
}

// AllToAllvGathered is AllToAllv for callers that have already put, on
// every relay, the messages it carries for its local senders (the GPU
// hand-off: the senders copied them over NVLink/CUDA IPC into the relay's
// GPU staging and the relay copied them to host memory once). gathered
// holds, on this rank as a relay, every local sender s's message for d
// (key {s, d}) for which Via(s, d) is this rank, s not itself (an empty
// slice: no message). As a sender this rank hands nothing to relays: send
// is read only for local peers and for the destinations it sends to
// itself. Every rank of the communicator makes the same kind of call.
func (p *Proxy) AllToAllvGathered(ctx context.Context, send, recv [][]byte, gathered map[[2]int][]byte) (Stats, error) {
	if gathered == nil {
		gathered = map[[2]int][]byte{}
	}
	return p.allToAllv(ctx, send, recv, gathered)
}

func (p *Proxy) allToAllv(ctx context.Context, send, recv [][]byte, gathered map[[2]int][]byte) (Stats, error) {
	var st Stats
	n := len(p.cfg.Hosts)
	if len(send) != n || len(recv) != n {
		return st, fmt.Errorf("rank %d proxy: all-to-all with %d sends and %d receives for %d ranks", p.cfg.Rank, len(send), len(recv), n)
	}
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil {
		return st, fmt.Errorf("rank %d proxy: aborted earlier: %w", p.cfg.Rank, err)
	}
	c := &a2a{p: p, ctx: ctx, seq: p.seq.Add(1), send: send, recv: recv, st: &st, gathered: gathered}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	defer c.cancel(nil)
	c.run()
	err = c.settle() // before st is read: the call's goroutines fill it
	return st, err
}

// a2a is one AllToAllv call.
type a2a struct {
	p          *Proxy
	ctx        context.Context
	cancel     context.CancelCauseFunc
	seq        uint64
	send, recv [][]byte
	gathered   map[[2]int][]byte // AllToAllvGathered's, or nil
	st         *Stats
	wg         sync.WaitGroup
	mu         sync.Mutex
	errs       []error
}

func (c *a2a) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
	c.cancel(err)
}

// goWait runs f in the call's wait group; its error fails the call.
func (c *a2a) goWait(f func() error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := f(); err != nil {
			c.fail(err)
		}
	}()
}

func (c *a2a) waitReq(r fabric.Request, what string) {
	c.goWait(func() error {
		if err := r.Wait(c.ctx); err != nil {
			return fmt.Errorf("rank %d proxy: %s: %w", c.p.cfg.Rank, what, err)
		}
		return nil
	})
}

// settle waits for the call, adds its counters to the proxy's totals, and
// aborts the proxy if the call failed (its connections are then unusable).
func (c *a2a) settle() error {
	err := c.wait()
	c.p.total.add(c.st)
	if err != nil {
		c.p.Abort(err)
	}
	return err
}

func (c *a2a) wait() error {
	c.wg.Wait()
	if len(c.errs) == 0 {
		return nil
	}
	// The first error is the cause; the others are mostly its echo.
	for _, e := range c.errs {
		if !errors.Is(e, context.Canceled) {
			return e
		}
	}
	return c.errs[0]
}

// local ranks of host h, ascending.
func (c *a2a) ranksOf(h string) []int {
	var out []int
	for r, x := range c.p.cfg.Hosts {
		if x == h {
			out = append(out, r)
		}
	}
	return out
}

// dstsVia lists the ranks on other hosts for which via relays s's
// messages, ascending.
func (c *a2a) dstsVia(s, via int) []int {
	var out []int
	for d, h := range c.p.cfg.Hosts {
		if h != c.p.cfg.Hosts[s] && c.p.cfg.Via(s, d) == via {
			out = append(out, d)
		}
	}
	return out
}

func (c *a2a) run() {
	cfg := &c.p.cfg
	me, host := cfg.Rank, cfg.Hosts[cfg.Rank]
	local := c.ranksOf(host)
	copy(c.recv[me], c.send[me])
	// A. Blocks for local peers, posted first so each local link carries
	// them ahead of the relay traffic (links are FIFO).
	for _, q := range local {
		if q == me {
			continue
		}
		if len(c.send[q]) > 0 {
			c.waitReq(cfg.Local.Send(q, localTag(tagDirect, c.seq, 0, 0), c.send[q]), fmt.Sprintf("send to local rank %d", q))
		}
		if len(c.recv[q]) > 0 {
			c.waitReq(cfg.Local.Recv(q, localTag(tagDirect, c.seq, 0, 0), c.recv[q]), fmt.Sprintf("receive from local rank %d", q))
		}
	}
	// B. Hand the relays their share: the lengths, then the chunks (not
	// when the caller gathered them on the relays).
	for _, v := range local {
		if c.gathered != nil {
			break
		}
		ds := c.dstsVia(me, v)
		if v == me || len(ds) == 0 {
			continue
		}
		sizes := make([]byte, 0, 8*len(ds))
		for _, d := range ds {
			sizes = appendLen(sizes, len(c.send[d]))
		}
		c.waitReq(cfg.Local.Send(v, localTag(tagSizes, c.seq, 0, 0), sizes), fmt.Sprintf("hand lengths to relay rank %d", v))
		for _, d := range ds {
			for k := range c.p.chunks(len(c.send[d])) {
				c.waitReq(cfg.Local.Send(v, localTag(tagData, c.seq, d, k), c.p.chunk(c.send[d], k)), fmt.Sprintf("hand rank %d's data to relay rank %d", d, v))
			}
		}
	}
	// C. Relay: read what local senders hand over, send per destination.
	c.relay(local)
	// D. Receive: one multi-receive per round and up to MaxRecvs senders
	// of one relay.
	c.receive()
}
