package netlink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/hello"
)

// Config says who owns an endpoint. Every field but Rank may be zero.
type Config struct {
	Rank int
	// Host is this rank's host name: peers name it in their errors.
	Host string
	// Secret is the job secret: every connection's hello carries an HMAC
	// of it (bound to the listener's handle, both ranks, the job and the
	// communicator), and a listener drops connections whose proof is wrong.
	Secret []byte
	// JobID and Comm bind the proof to one communicator of one job.
	JobID, Comm string
	// Kind is the links' kind (default fabric.KindNet).
	Kind fabric.Kind
	// Bandwidth (bytes/s) is the links' nominal bandwidth where the device
	// does not report a speed (0: leave it 0).
	Bandwidth float64
	// Latency is the links' nominal latency where the device reports none.
	Latency time.Duration
	// Logger gets dropped connections; nil discards them.
	Logger hclog.Logger
}

// Endpoint is a fabric.Endpoint over one device of a network provider. Its
// Address is its listener's handle. Connect, called on both ranks of a
// pair, dials the peer's handle with a hello naming this rank and host and
// proving the job secret (fabric/net/hello, the connection layer), and
// waits for the peer's connection to arrive at this endpoint's listener
// (matched by the peer's hello).
type Endpoint struct {
	conns  *hello.Layer
	cfg    Config
	log    hclog.Logger
	drops  *hello.Drops // connections that did not prove the secret (one WARN a minute)
	l      *hello.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	arrived map[int]chan arrival // by peer rank
}

// arrival is a peer's connection to this endpoint and the host its hello
// named.
type arrival struct {
	r    net.RecvConn
	host string
}

// NewEndpoint listens on device dev of p for rank's links (no host name, an
// empty job secret).
func NewEndpoint(p net.Provider, dev, rank int) (*Endpoint, error) {
	return Open(p, dev, Config{Rank: rank})
}

// Open listens on device dev of p for the links of the rank cfg names.
func Open(p net.Provider, dev int, cfg Config) (*Endpoint, error) {
	if cfg.Kind == "" {
		cfg.Kind = fabric.KindNet
	}
	e := &Endpoint{cfg: cfg, log: cfg.Logger, arrived: map[int]chan arrival{}}
	if e.log == nil {
		e.log = hclog.NewNullLogger()
	}
	fail := func(err error) (*Endpoint, error) {
		return nil, fmt.Errorf("%s endpoint of rank %d on %s: %w", cfg.Kind, cfg.Rank, cfg.Host, err)
	}
	e.drops = &hello.Drops{Log: e.log, What: fmt.Sprintf("%s endpoint of rank %d on %s", cfg.Kind, cfg.Rank, cfg.Host)}
	var err error
	if e.conns, err = hello.Open(p, dev, hello.Options{Config: helloConfig(cfg), MaxTag: maxTag,
		What: "netlink (FLEXLINK_NET picks the provider)", Drops: e.drops}); err != nil {
		return fail(err)
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if e.l, err = e.conns.Listen(e.ctx); err != nil {
		e.cancel()
		return fail(err)
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.l.Serve(e.ctx, func(h hello.Hello) error { return checkPeer(h, cfg) }, e.file)
	}()
	return e, nil
}

func (e *Endpoint) Kind() fabric.Kind { return e.cfg.Kind }
func (e *Endpoint) Address() []byte   { return e.l.Handle() }

func (e *Endpoint) slot(peer int) chan arrival {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.arrived[peer]
	if c == nil {
		c = make(chan arrival, 1)
		e.arrived[peer] = c
	}
	return c
}

// file files an accepted connection under the rank its hello names; a
// second one from the same rank is refused (dropped).
func (e *Endpoint) file(r net.RecvConn, h hello.Hello) error {
	select {
	case e.slot(h.From) <- arrival{r, string(h.Extra)}:
		return nil
	default:
		return fmt.Errorf("a second connection from rank %d (a replayed hello?)", h.From)
	}
}

// Connect makes the link to peer: this rank's connection to the peer's
// address, and the peer's connection to this endpoint.
func (e *Endpoint) Connect(ctx context.Context, peer int, addr []byte) (fabric.Link, error) {
	fail := func(err error) (fabric.Link, error) {
		return nil, fmt.Errorf("%s link from rank %d (host %s) to rank %d: %w", e.cfg.Kind, e.cfg.Rank, e.cfg.Host, peer, err)
	}
	if peer == e.cfg.Rank || peer < 0 {
		return fail(fmt.Errorf("invalid peer"))
	}
	s, q, err := e.conns.Dial(ctx, addr, hello.Hello{From: e.cfg.Rank, To: peer, Extra: []byte(e.cfg.Host)})
	if err != nil {
		return fail(err)
	}
	sent := make(chan error, 1)
	go func() { _, err := q.Wait(ctx); sent <- err }()
	for {
		select {
		case a := <-e.slot(peer):
			p, dev := e.conns.Provider(), e.conns.Device()
			bw := dev.Speed
			if bw == 0 {
				bw = e.cfg.Bandwidth
			}
			lat := dev.Latency
			if lat == 0 {
				lat = e.cfg.Latency
			}
			l := New(peer, s, a.r, fabric.Props{
				Kind: e.cfg.Kind, Bandwidth: bw, Latency: lat,
				Desc: fmt.Sprintf("%s %s %s rank %d <-> rank %d (host %s)", e.cfg.Kind, p.Name(), dev.Name, e.cfg.Rank, peer, a.host),
			})
			via := string(e.cfg.Kind) + " " + p.Name() // "net tcp", "net ucx"
			if p.Name() == string(e.cfg.Kind) {
				via = p.Name() // the host tcp link
			}
			l.who = fmt.Sprintf("rank %d (host %s) over %s %s", peer, a.host, via, dev.Name)
			return l, nil
		case err := <-sent:
			if err != nil && ctx.Err() == nil {
				s.Close()
				return fail(fmt.Errorf("the peer refused this rank's hello (wrong job secret or communicator?): %w", err))
			}
			sent = nil
		case <-ctx.Done():
			s.Close()
			return fail(fabric.CtxErr(ctx))
		}
	}
}

// Close stops listening. Links already made stay.
func (e *Endpoint) Close() error {
	e.cancel()
	err := e.l.Close()
	e.wg.Wait()
	e.drops.Stop() // the drops not yet warned about
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.arrived {
		select {
		case a := <-c:
			a.r.Close()
		default:
		}
	}
	return err
}

var _ fabric.Endpoint = (*Endpoint)(nil)
