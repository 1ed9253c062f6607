// Package hello is the network transport's one connection layer: how
// netlink, the PXN proxy and the GPU plane's net share listen, connect and
// accept over a provider of fabric/net (tcp, ucx), and how a connection
// says who opened it and proves the job secret.
//
// A Layer is one rank's connections of one kind over one device of a
// provider. Open checks that the provider carries the caller's tags
// (net.CheckTags). Dial connects to a listener's handle and sends the
// connection's first message, its hello:
//
//	magic u32 | from u32 | to u32 | extra length u8 | extra | proof
//
// where proof is auth.Proof over the connection kind (Config.Purpose), the
// job, the scope (the communicator or key), the listener's handle (a hello
// is good for one listener only: replayed to another it fails) and the
// bytes before it. Extra is the caller's (a host name, a connection kind).
// The second message is an empty confirmation, which the listener takes
// only once it accepted the hello, so the dialer learns of a refusal.
//
// A Listener hands over only connections whose hello proves the secret and
// names a peer the caller wants (Accept: one; Serve: every one); a
// connection that sends garbage, a hello for another listener, job or
// rank, or nothing within the deadline is dropped (aborted) with one
// rate-limited WARN (Drops), and the listener keeps waiting for the real
// peer. Silent connections are waited for side by side, so none holds up
// the peer behind it.
package hello

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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
// handle (the one s connected to), and after it the confirmation: an
// empty message of the same tag, which the listener receives only once it
// has accepted the hello. The request returned is the confirmation's: it
// completes when the listener took the hello, and fails when the listener
// refused it (it aborts the connection). Later sends on s follow both.
func (c Config) Send(s net.SendConn, h Hello, handle []byte) (net.Request, error) {
	if _, err := s.ISend(c.Marshal(h, handle), c.Tag, nil); err != nil {
		return nil, err
	}
	return s.ISend(nil, c.Tag, nil)
}

// Receive waits at most wait (DefaultWait when 0) for the hello on r, a
// connection accepted by the listener whose handle is handle, and checks
// it, then checks it with want (nil: any hello), and only then takes the
// confirmation that follows it (Send), which tells the dialer it was
// accepted. A message with another tag, or longer than a hello (a
// non-empty confirmation), fails it: what a connection may send before it
// proved itself is bounded by MaxBytes.
func (c Config) Receive(ctx context.Context, r net.RecvConn, handle []byte, wait time.Duration, want func(Hello) error) (Hello, error) {
	if wait <= 0 {
		wait = DefaultWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	silent := func(what string, err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("no %s within %v", what, wait)
		}
		return fmt.Errorf("no %s: %w", what, err)
	}
	buf := make([]byte, MaxBytes)
	q, err := r.IRecv([][]byte{buf}, []uint64{c.Tag}, nil)
	var sizes []int
	if err == nil {
		sizes, err = q.Wait(ctx)
	}
	if err != nil {
		return Hello{}, silent("hello", err)
	}
	h, err := c.Parse(buf[:sizes[0]], handle)
	if err == nil && want != nil {
		err = want(h)
	}
	if err != nil {
		return h, err
	}
	if q, err = r.IRecv([][]byte{nil}, []uint64{c.Tag}, nil); err == nil {
		_, err = q.Wait(ctx)
	}
	if err != nil {
		return h, silent(fmt.Sprintf("confirmation after the hello of rank %d", h.From), err)
	}
	return h, nil
}
