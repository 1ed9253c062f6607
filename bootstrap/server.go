package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/auth"
	"github.com/flexlink/flexlink/internal/ports"
)

const defaultHandshakeTimeout = 10 * time.Second

// refusalInterval is how often, at most, the server warns about the
// connections it refused (a port scan or a stray client must not flood
// the job's stderr); each refusal is logged at DEBUG.
const refusalInterval = 10 * time.Second

// Server is the job's bootstrap store server. It authenticates ranks,
// completes collectives once all ranks have contributed, keeps the
// key/value table, and fails the job for everyone when a rank is lost or
// someone aborts. A connection that misbehaves before it has joined is
// dropped and counted, with a rate-limited WARN; the job goes on.
type Server struct {
	cfg ServerConfig
	ln  net.Listener
	eng *engine
	log hclog.Logger
	// drops counts the connections refused before joining (a scan, a
	// process of another job): one WARN, then one per refusalInterval with
	// the count (internal/auth.Drops); each at DEBUG.
	drops *auth.Drops

	mu      sync.Mutex
	conns   map[net.Conn]*peerConn // nil value: still in handshake
	closing bool
	done    chan struct{} // closed by Close: ends the accept loop's back-off wait
	wg      sync.WaitGroup
}

// NewServer listens on cfg.Addr and serves in background goroutines until
// Close. cfg.Size must be positive and cfg.Secret non-empty.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Size <= 0 {
		return nil, fmt.Errorf("bootstrap: server: size %d", cfg.Size)
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("bootstrap: server: empty job secret")
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	cfg.PeerTimeout = peerTimeoutOr(cfg.PeerTimeout)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	ln, err := listen(cfg.Addr, cfg.Ports)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: server: listen %s: %w", cfg.Addr, err)
	}
	log := cfg.Logger.Named("bootstrap")
	s := &Server{cfg: cfg, ln: ln, log: log, drops: &auth.Drops{Log: log, What: "bootstrap server", Every: refusalInterval}, eng: newEngine(cfg.Size, log, cfg.KeepOnLoss, cfg.OnEvent), conns: make(map[net.Conn]*peerConn), done: make(chan struct{})}
	s.wg.Add(1)
	go s.acceptLoop()
	log.Debug("serving", "addr", s.Addr(), "size", cfg.Size, "job", cfg.JobID)
	return s, nil
}

// listen listens on addr, or, when addr's port is 0 and r is a range, on
// the first free port of r at addr's host.
func listen(addr string, r ports.Range) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" || r.IsZero() {
		return net.Listen("tcp", addr)
	}
	return r.Listen(context.Background(), "tcp", host)
}

// Addr returns the host:port actually bound.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Abort fails the job with err's sentinel class and text, as from the
// launcher: every rank's pending and later calls fail, and ranks that join
// later learn of it at once. It does not block on slow ranks.
func (s *Server) Abort(err error) {
	if err == nil {
		err = errors.New("aborted")
	}
	s.eng.abort(rankLauncher, classOf(err), truncate(err.Error(), maxTextLen))
}

// Close stops accepting, flushes what is queued for each rank (waiting at
// most about two seconds in all), closes every connection and waits for
// the server's goroutines. Ranks still connected see the server as lost.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	close(s.done)
	conns := make(map[net.Conn]*peerConn, len(s.conns))
	for c, p := range s.conns {
		conns[c] = p
	}
	s.mu.Unlock()
	err := s.ln.Close()
	var wg sync.WaitGroup
	for c, p := range conns {
		if p == nil {
			_ = c.Close()
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); p.shutdown(flushBound) }()
	}
	wg.Wait()
	s.wg.Wait()
	s.drops.Stop()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("bootstrap: server close: %w", err)
	}
	return nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: log, wait a little (or until
			// Close), go on.
			s.log.Warn("accept", "error", err)
			t := time.NewTimer(backoff)
			select {
			case <-s.done:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = nil
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve runs one connection: handshake, join, then its read loop.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	from := remoteHost(c)
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	ic, br, bw := newConnPair(c)
	h, err := serverHandshake(br, bw, &s.cfg)
	if err != nil {
		var rej *rejection
		if errors.As(err, &rej) {
			_ = writeMsg(bw, rejectMsg{Class: rej.class, Text: rej.text})
			s.refused(h, rej.text)
		}
		s.drops.Drop(fmt.Errorf("from %s, during handshake: %w", from, err))
		return
	}
	rank := int(h.Rank)
	transient := s.cfg.Transient != nil && s.cfg.Transient(h.Host)
	var pc *peerConn
	session, err := s.eng.join(rank, h.Host, transient, sinkFunc(func(o *outMsg) { _ = pc.send(o.encoded(), nil) }), func() {
		pc = startPeerConn(c, ic, br, bw, s.cfg.PeerTimeout)
		_ = pc.send(marshal(welcomeMsg{}), nil)
	})
	if err != nil {
		_ = writeMsg(bw, rejectMsg{Class: classMismatch, Text: err.Error()})
		s.refused(h, err.Error())
		s.drops.Drop(fmt.Errorf("from %s, after handshake (rank %d): %w", from, rank, err))
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		pc.shutdown(0)
		return
	}
	s.conns[c] = pc
	s.mu.Unlock()
	s.log.Debug("rank joined", "rank", rank, "host", h.Host, "from", from)

	bye, err := s.readLoop(pc, rank, session)
	pc.readerExited()
	err = pc.readErr(err)
	pc.shutdown(flushBound)
	if bye {
		s.log.Debug("rank left", "rank", rank, "host", h.Host)
		return
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	switch {
	case closing:
	case transient:
		s.log.Debug("transient member lost", "rank", rank, "host", h.Host, "from", from, "error", err)
		s.eng.lost(rank, session, describeReadErr(err, pc.timeout)+" before goodbye")
	default:
		s.log.Error("rank lost", "rank", rank, "host", h.Host, "from", from, "error", err)
		s.eng.lost(rank, session, describeReadErr(err, pc.timeout)+" before goodbye")
	}
}

// refused tells the owner about a connection refused after its hello
// (h, the zero hello when it sent none).
func (s *Server) refused(h helloMsg, why string) {
	if s.cfg.OnEvent == nil {
		return
	}
	r := int(h.Rank)
	if h.Job == "" && h.Size == 0 {
		r = -1
	}
	s.cfg.OnEvent(Event{Kind: EventRefused, Rank: r, Host: h.Host, Text: why})
}

// readLoop feeds the messages of rank's session to the engine until the
// connection ends. It reports whether the rank said goodbye first.
func (s *Server) readLoop(pc *peerConn, rank int, session uint64) (bye bool, err error) {
	for {
		f, err := readFrame(pc.br, MaxFrameSize)
		if err != nil {
			return bye, err
		}
		m, err := decodeMsg(f)
		if err != nil {
			return bye, err
		}
		switch m.(type) {
		case heartbeatMsg:
		case byeMsg:
			if !bye {
				bye = true
				s.eng.leave(rank, session)
			}
		case collMsg, putMsg, getMsg, abortMsg:
			if !bye {
				s.eng.handle(rank, session, m)
			}
		default:
			return bye, fmt.Errorf("unexpected %s from rank %d: %w", m.msgType(), rank, errMalformed)
		}
	}
}

// sinkFunc adapts a function to sink.
type sinkFunc func(o *outMsg)

func (f sinkFunc) deliver(o *outMsg) { f(o) }
