// Package net is flexlink's network transport: one interface, shaped after
// NCCL's net plugin API (v8–v10), and one sub-package per provider (tcp,
// always available, pure Go; ucx, libucp loaded at run time, which is the
// verbs path where an RDMA NIC exists).
//
// The model is NCCL's: a Provider lists Devices (NICs); a receiver Listens on
// a device and publishes the Listener's opaque Handle (at most
// MaxHandleBytes) out of band (through bootstrap); a sender Connects to that
// handle and the receiver Accepts. A connection is unidirectional: a SendConn
// on one side, a RecvConn on the other. Sends and receives are non-blocking
// (ISend, IRecv) and complete through Request.Test (or Wait).
//
// Beyond NCCL: every connection has Abort, which fails everything in flight,
// and every error names the device and the remote end.
package net

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"syscall"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// MaxHandleBytes bounds a listen handle, as NCCL_NET_HANDLE_MAXSIZE does.
const MaxHandleBytes = 128

// MaxRecvs is the most buffers one IRecv may carry (multi-receive).
const MaxRecvs = 8

// MemKind says which memory a device can read and write.
type MemKind uint8

const (
	MemHost MemKind = 1 << iota // host memory (every provider)
	MemGPU                      // GPU memory (GPUDirect RDMA; no provider here yet)
)

// Device is one NIC as a provider sees it.
type Device struct {
	Name     string        // provider's name for it: "eth0", "mlx5_0:1"
	PCIPath  string        // sysfs path of the PCI device, "" when virtual
	Speed    float64       // bytes per second, one direction (0: unknown)
	Latency  time.Duration // one-way latency of a small message (0: unknown)
	Ptr      MemKind       // memory the device reads and writes directly
	MaxRecvs int           // most buffers one IRecv takes (1..MaxRecvs)
	// MaxMessage bounds one message in bytes (0: no bound below 1<<62).
	MaxMessage int64
}

// Provider is one network transport implementation.
//
// Devices is fixed once the provider is open. Listen and Connect take a
// device index into Devices. Close fails every connection still open with
// errs.ErrClosed and releases the provider. All methods are safe for
// concurrent use.
type Provider interface {
	Name() string
	Devices() []Device
	// TagBits is how many low bits of a message tag the provider carries
	// (tcp 64, ucx 20: it keeps the rest for matching). ISend and IRecv
	// refuse a larger tag with an error wrapping errs.ErrNotSupported;
	// callers check their largest tag once, up front, with CheckTags.
	TagBits() int
	// Listen opens a listening endpoint on device dev. The Handle it
	// returns is published to the peer out of band.
	Listen(ctx context.Context, dev int) (Listener, error)
	// Connect opens the sending side of a connection to the listener whose
	// handle is given, from local device dev. It returns when the connection
	// can carry sends (the receiver need not have called Accept yet, but
	// sends complete only once it has), or with an error when ctx ends, the
	// handle is malformed, or the peer refuses.
	Connect(ctx context.Context, dev int, handle []byte) (SendConn, error)
	// RegMr registers buf for use in ISend/IRecv. Providers that need no
	// registration return a region that records the range. The region must
	// be deregistered before buf is freed.
	RegMr(buf []byte, kind MemKind) (MemRegion, error)
	Close() error
}

// Listener accepts receiving connections.
type Listener interface {
	// Handle returns the opaque bytes a sender passes to Connect
	// (len ≤ MaxHandleBytes). Owned by the caller.
	Handle() []byte
	// Accept returns the receiving side of the next connection made to this
	// listener; it blocks until one arrives or ctx ends. A connection whose
	// opening bytes are garbage (wrong magic, oversized frame, bad version)
	// is dropped and Accept keeps waiting.
	Accept(ctx context.Context) (RecvConn, error)
	Close() error
}

// MemRegion is a registered buffer range.
type MemRegion interface {
	Deregister() error
}

// SendConn is the sending side of a connection.
//
// Ordering: messages are delivered in the order of the ISend calls and
// matched to the receiver's buffers in that order (see RecvConn).
// Ownership: buf must stay unmodified, and allocated, until its request
// completes. Callers that ISend from several goroutines order the calls
// themselves.
type SendConn interface {
	// ISend posts one message of len(buf) bytes (0 allowed) with tag. mr is
	// the region buf lies in, or nil for unregistered host memory (providers
	// that need registration register internally). It never blocks on the
	// network: the request completes when the receiver has the data.
	ISend(buf []byte, tag uint64, mr MemRegion) (Request, error)
	// Abort fails every pending and later request with err (wrapped so it
	// names the connection) and tells the peer, best effort.
	Abort(err error)
	Close() error
}

// RecvConn is the receiving side of a connection.
//
// Matching (NCCL's multi-receive): an IRecv with n buffers (1 ≤ n ≤
// MaxRecvs) and n tags takes the next n messages of the connection, in send
// order; each message lands in the buffer whose tag equals the message's
// tag (tags of one IRecv must differ). A message whose tag is not among the
// request's tags, or that is longer than its buffer, fails the request with
// an error wrapping errs.ErrMismatch; the connection is then unusable. A
// buffer may be longer than its message: Request.Test reports the sizes.
type RecvConn interface {
	IRecv(bufs [][]byte, tags []uint64, mrs []MemRegion) (Request, error)
	Abort(err error)
	Close() error
}

// Request is one ISend or IRecv.
//
// Test never blocks. It returns done=false while the operation is in flight;
// once done, err is its outcome and, for a receive, sizes[i] is the length
// of the message that landed in buffer i (for a send, sizes is [len(buf)]).
// Test may be called again after done and returns the same answer. Wait
// polls Test until done or ctx ends; on ctx's end the request stays in
// flight (its buffers stay owned by the connection until Abort or Close).
type Request interface {
	Test() (done bool, sizes []int, err error)
	Wait(ctx context.Context) (sizes []int, err error)
}

// MaxTag is the largest tag a provider that carries bits bits of tag
// (Provider.TagBits) takes.
func MaxTag(bits int) uint64 {
	if bits >= 64 {
		return ^uint64(0)
	}
	if bits <= 0 {
		return 0
	}
	return 1<<bits - 1
}

// CheckTags returns nil when every tag up to max fits p's tag width, and
// otherwise an error wrapping errs.ErrNotSupported that names what needs
// the tags (the caller, and the setting that chose it), the bits it needs
// and the provider's.
func CheckTags(p Provider, max uint64, what string) error {
	if max <= MaxTag(p.TagBits()) {
		return nil
	}
	return fmt.Errorf("%s needs message tags up to %#x (%d bits); the %s provider carries %d bits of tag: %w",
		what, max, bits.Len64(max), p.Name(), p.TagBits(), errs.ErrNotSupported)
}

// ErrBadHandle reports a handle that is not one this provider made.
var ErrBadHandle = errors.New("malformed net handle")

// ConnError names both ends of a failed connection.
type ConnError struct {
	Provider string // "tcp", "ucx"
	Device   string // local device name
	Remote   string // remote address or peer description
	Op       string // "send", "recv", "connect", "accept"
	Err      error
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("net %s %s on %s (remote %s): %v", e.Provider, e.Op, e.Device, e.Remote, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }

// WaitDone is the providers' Wait: it blocks until done is closed (the
// request finished) or ctx ends while the request is still in flight.
func WaitDone(ctx context.Context, done <-chan struct{}, provider string) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done:
			return nil
		default:
			return fmt.Errorf("net %s request still in flight: %w", provider, ctx.Err())
		}
	}
}

// Unreachable marks a dial or hello error that says the peer cannot be
// reached (its listener is gone: refused, reset or a broken pipe; its host
// is down or cut off: no route, network unreachable, timed out) as
// errs.ErrPeerLost, as a connection that breaks is: a rank that dials a
// peer whose host has just gone fails on a lost peer, and flexrun waits
// for that host's fate instead of naming the rank that dialed. Every
// provider's Connect uses it.
func Unreachable(err error) error {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", err, errs.ErrPeerLost)
		}
	}
	return err
}
