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
// pair, connects to the peer's handle, sends a hello naming this rank and
// host and proving the job secret as the connection's first message, and
// waits for the peer's connection to arrive at this endpoint's listener
// (matched by the peer's hello).
type Endpoint struct {
	p      net.Provider
	dev    int
	cfg    Config
	log    hclog.Logger
	drops  *hello.Drops // connections that did not prove the secret (one WARN a minute)
	l      net.Listener
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

// helloWait bounds how long an accepted connection may take to say who it
// is.
const helloWait = 10 * time.Second

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
	if err := net.CheckTags(p, maxTag, "netlink (FLEXLINK_NET picks the provider)"); err != nil {
		return nil, fmt.Errorf("%s endpoint of rank %d on %s: %w", cfg.Kind, cfg.Rank, cfg.Host, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l, err := p.Listen(ctx, dev)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s endpoint of rank %d on %s: %w", cfg.Kind, cfg.Rank, cfg.Host, err)
	}
	e := &Endpoint{p: p, dev: dev, cfg: cfg, log: cfg.Logger, l: l, ctx: ctx, cancel: cancel, arrived: map[int]chan arrival{}}
	if e.log == nil {
		e.log = hclog.NewNullLogger()
	}
	e.drops = &hello.Drops{Log: e.log, What: fmt.Sprintf("%s endpoint of rank %d on %s", cfg.Kind, cfg.Rank, cfg.Host)}
	e.wg.Add(1)
	go e.accept()
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
			h, err := e.readHello(r)
			if err != nil {
				e.drops.Drop(err)
				r.Abort(err)
				r.Close()
				return
			}
			select {
			case e.slot(h.from) <- arrival{r, h.host}:
			default:
				e.drops.Drop(fmt.Errorf("a second connection from rank %d (a replayed hello?)", h.from))
				r.Close()
			}
		}()
	}
}

// readHello receives and checks an accepted connection's hello.
func (e *Endpoint) readHello(r net.RecvConn) (helloMsg, error) {
	buf := make([]byte, hello.MaxBytes)
	ctx, cancel := context.WithTimeout(e.ctx, helloWait)
	defer cancel()
	q, err := r.IRecv([][]byte{buf}, []uint64{helloTag}, nil)
	var sizes []int
	if err == nil {
		sizes, err = q.Wait(ctx)
	}
	if err != nil {
		return helloMsg{}, fmt.Errorf("no hello: %w", err)
	}
	h, err := checkHello(buf[:sizes[0]], e.cfg, e.Address())
	if err != nil {
		return h, err
	}
	// Only now take the confirmation: its send completes at the dialer
	// once this receive has it, so a dialer whose hello was refused sees
	// its confirmation fail with this side's abort.
	q, err = r.IRecv([][]byte{nil}, []uint64{confirmTag}, nil)
	if err == nil {
		_, err = q.Wait(ctx)
	}
	if err != nil {
		return h, fmt.Errorf("no confirmation after the hello of rank %d: %w", h.from, err)
	}
	return h, nil
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
	s, err := e.p.Connect(ctx, e.dev, addr)
	if err != nil {
		return fail(err)
	}
	h := helloMsg{from: e.cfg.Rank, to: peer, host: e.cfg.Host}
	_, err = s.ISend(h.marshal(e.cfg, addr), helloTag, nil)
	var q net.Request
	if err == nil {
		q, err = s.ISend(nil, confirmTag, nil)
	}
	if err != nil {
		s.Close()
		return fail(err)
	}
	sent := make(chan error, 1)
	go func() { _, err := q.Wait(ctx); sent <- err }()
	for {
		select {
		case a := <-e.slot(peer):
			dev := e.p.Devices()[e.dev]
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
				Desc: fmt.Sprintf("%s %s %s rank %d <-> rank %d (host %s)", e.cfg.Kind, e.p.Name(), dev.Name, e.cfg.Rank, peer, a.host),
			})
			via := string(e.cfg.Kind) + " " + e.p.Name() // "net tcp", "net ucx"
			if e.p.Name() == string(e.cfg.Kind) {
				via = e.p.Name() // the host tcp link
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
