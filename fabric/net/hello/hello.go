// Package hello is how a connection of the network transport (fabric/net)
// says who opened it and proves the job secret, and how a listener takes
// only the connections that do. A connection's first message is its hello:
//
//	magic u32 | from u32 | to u32 | extra length u8 | extra | proof
//
// where proof is auth.Proof over the connection kind (Config.Purpose), the
// job, the scope (the communicator or key), the listener's handle (a hello
// is good for one listener only: replayed to another it fails) and the
// bytes before it. Extra is the caller's (a host name, a connection kind).
//
// Accept takes connections on a listener until one's hello proves the
// secret; a connection that sends garbage, a hello for another listener,
// job or rank, or nothing within the deadline is dropped (aborted) with one
// rate-limited WARN (Drops), and the listener keeps waiting for the real
// peer. Silent connections are waited for side by side, so none holds up
// the peer behind it.
package hello

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/auth"
	"github.com/flexlink/flexlink/internal/errs"
)

// Wire format constants.
const (
	magic    = 0x4f4c4846 // "FHLO"
	fixed    = 13         // magic, from, to, extra length
	MaxExtra = 255        // most bytes of Hello.Extra
	// MaxBytes is the largest hello.
	MaxBytes = fixed + MaxExtra + auth.Size
	// DefaultWait is how long an accepted connection may stay silent
	// before its hello (as the bootstrap's handshake).
	DefaultWait = 10 * time.Second
)

// ErrNotHello is wrapped by Parse's error for bytes that are not a hello
// (wrong magic, or sizes that do not add up).
var ErrNotHello = errors.New("not a flexlink hello")

// Config is what the hellos of one kind of connection prove.
type Config struct {
	Secret  []byte // the per-job secret (never sent)
	JobID   string
	Purpose string // the kind of connection: "flexlink gpu net part hello"
	Scope   string // the communicator, or key, the connections belong to
	Tag     uint64 // the hello's message tag (within the provider's tag width)
}

// Hello is who opened a connection: rank From toward rank To, with the
// caller's Extra bytes (at most MaxExtra).
type Hello struct {
	From, To int
	Extra    []byte
}

func (h Hello) body() []byte {
	extra := h.Extra
	if len(extra) > MaxExtra {
		extra = extra[:MaxExtra]
	}
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, MaxBytes), magic)
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(h.From)))
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(h.To)))
	b = append(b, byte(len(extra)))
	return append(b, extra...)
}

func (c Config) proof(handle, body []byte) []byte {
	return auth.Proof(c.Secret, c.Purpose, []byte(c.JobID), []byte(c.Scope), handle, body)
}

// Marshal returns h as the hello for the listener whose handle is handle.
// Extra beyond MaxExtra bytes is cut.
func (c Config) Marshal(h Hello, handle []byte) []byte {
	b := h.body()
	return append(b, c.proof(handle, b)...)
}

// Parse checks b, a hello that reached the listener whose handle is
// handle, and returns it. The error wraps ErrNotHello for garbage and
// errs.ErrAuth for a hello that does not prove the secret for this job,
// scope and listener.
func (c Config) Parse(b, handle []byte) (Hello, error) {
	if len(b) < fixed+auth.Size || binary.LittleEndian.Uint32(b) != magic {
		return Hello{}, fmt.Errorf("%d bytes: %w", len(b), ErrNotHello)
	}
	n := int(b[12])
	if len(b) != fixed+n+auth.Size {
		return Hello{}, fmt.Errorf("%d bytes with %d bytes of extra: %w", len(b), n, ErrNotHello)
	}
	h := Hello{
		From:  int(int32(binary.LittleEndian.Uint32(b[4:]))),
		To:    int(int32(binary.LittleEndian.Uint32(b[8:]))),
		Extra: append([]byte(nil), b[fixed:fixed+n]...),
	}
	body := b[:fixed+n]
	if !auth.Valid(b[len(body):], c.Secret, c.Purpose, []byte(c.JobID), []byte(c.Scope), handle, body) {
		return h, fmt.Errorf("hello from rank %d to rank %d does not prove the job secret for job %q, %s, this listener: %w",
			h.From, h.To, c.JobID, c.Scope, errs.ErrAuth)
	}
	return h, nil
}

// Send posts h as the next message on s, for the listener whose handle is
// handle (the one s connected to). The request completes when the
// receiver has the hello; later sends on s follow it.
func (c Config) Send(s net.SendConn, h Hello, handle []byte) (net.Request, error) {
	return s.ISend(c.Marshal(h, handle), c.Tag, nil)
}

// Receive waits at most wait (DefaultWait when 0) for the hello on r, a
// connection accepted by the listener whose handle is handle, and checks
// it. A message with another tag or longer than a hello fails it.
func (c Config) Receive(ctx context.Context, r net.RecvConn, handle []byte, wait time.Duration) (Hello, error) {
	if wait <= 0 {
		wait = DefaultWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	buf := make([]byte, MaxBytes)
	q, err := r.IRecv([][]byte{buf}, []uint64{c.Tag}, nil)
	var sizes []int
	if err == nil {
		sizes, err = q.Wait(ctx)
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Hello{}, fmt.Errorf("no hello within %v", wait)
		}
		return Hello{}, fmt.Errorf("no hello: %w", err)
	}
	return c.Parse(buf[:sizes[0]], handle)
}

// Accept takes connections on l until one's hello proves the secret and
// passes want (nil: any); it returns that connection and its hello. Every
// other connection it took is aborted and reported to drops (may be nil)
// before it returns, those whose hello was still awaited included. The
// hellos of connections that arrive together are awaited side by side,
// each for at most wait (DefaultWait when 0). Accept returns an error only
// when ctx ends or the listener fails; connections still waiting for their
// hello are then dropped too.
func (c Config) Accept(ctx context.Context, l net.Listener, wait time.Duration, want func(Hello) error, drops *Drops) (net.RecvConn, Hello, error) {
	// Every connection taken here is reported before Accept returns:
	// cancel ends the hellos still awaited, then judging is waited for.
	var judging sync.WaitGroup
	defer judging.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	handle := l.Handle()
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
			r, err := l.Accept(ctx)
			if err != nil {
				failed <- err
				return
			}
			select {
			case conns <- r:
			case <-ctx.Done():
				r.Close()
				drops.Drop(errors.New("taken while the listener's peer was found: not heard"))
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
				h, err := c.Receive(ctx, r, handle, wait)
				if err == nil && want != nil {
					err = want(h)
				}
				select {
				case got <- result{r, h, err}:
				case <-ctx.Done(): // Accept is returning: not the one
					r.Abort(fmt.Errorf("dropped: %w", context.Cause(ctx)))
					r.Close()
					if err == nil {
						err = errors.New("another connection to this listener proved itself first")
					}
					drops.Drop(err)
				}
			}()
		case res := <-got:
			if res.err == nil {
				return res.r, res.h, nil
			}
			res.r.Abort(fmt.Errorf("dropped: %w", res.err))
			res.r.Close()
			drops.Drop(res.err)
		case err := <-failed:
			return nil, Hello{}, err
		}
	}
}
