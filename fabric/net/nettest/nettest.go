// Package nettest is the conformance suite every network provider
// (flexlink/fabric/net) passes. A provider's tests call Run with a function
// that opens a fresh provider; the suite opens two (two "hosts"), connects
// them through Listen/Connect/Accept and checks the contract of net.go:
// ordering, multi-receive, sizes, mismatches, Abort, garbage handles, peer
// loss, many connections and concurrent use. Data is checked against a
// pattern generated independently on both sides.
package nettest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"math/rand/v2"
	stdnet "net"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/testenv"
)

const (
	// opTimeout bounds every wait for something that must happen.
	opTimeout = 30 * time.Second
	// failTimeout is how quickly Abort and peer loss must fail requests.
	failTimeout = 5 * time.Second
)

// Option tunes Run.
type Option func(*config)

type config struct {
	large  int
	junk   func(t *testing.T, handle, junk []byte)
	noJunk bool
}

// Large sets the size of the largest message (default 64 MiB; 1 GiB is
// the ceiling, opt in from the provider's test with a flag).
func Large(n int) Option { return func(c *config) { c.large = n } }

// Junk lets the suite write garbage to a listener's transport: write junk
// to the endpoint named by handle as a stray client would (tcp: a raw
// socket to the listening address). Without it that case is skipped.
func Junk(write func(t *testing.T, handle, junk []byte)) Option {
	return func(c *config) { c.junk = write }
}

// JunkTCP is what a Junk writer of a provider whose listeners take raw
// TCP connections does once it has the address from the handle: it
// connects to addr and writes b (the listener may hang up early: that is
// the point).
func JunkTCP(t *testing.T, addr string, b []byte) {
	t.Helper()
	c, err := stdnet.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.Write(b)
}

// WithoutJunk leaves JunkOnListener out. Only the suite's own self-test
// uses it (its wrapped provider has no raw listener address to write to);
// a provider's test passes Junk, and without either the suite fails.
func WithoutJunk() Option {
	return func(c *config) { c.noJunk = true }
}

// Run runs the suite; open returns a fresh provider (Run closes it).
func Run(t *testing.T, open func(t *testing.T) net.Provider, opts ...Option) {
	c := config{large: 64 << 20}
	for _, o := range opts {
		o(&c)
	}
	if testing.Short() {
		c.large = min(c.large, 8<<20)
	}
	env := func(t *testing.T) *Env {
		t.Helper()
		return &Env{T: t, A: mustOpen(t, open), B: mustOpen(t, open)}
	}
	t.Run("Devices", func(t *testing.T) { testDevices(t, env(t)) })
	t.Run("Ordering", func(t *testing.T) { testOrdering(t, env(t)) })
	t.Run("MultiRecv", func(t *testing.T) { testMultiRecv(t, env(t)) })
	t.Run("Sizes", func(t *testing.T) { testSizes(t, env(t), c.large) })
	t.Run("LargerBuffer", func(t *testing.T) { testLargerBuffer(t, env(t)) })
	t.Run("TooLong", func(t *testing.T) { testTooLong(t, env(t)) })
	t.Run("WrongTag", func(t *testing.T) { testWrongTag(t, env(t)) })
	t.Run("BadRecvArgs", func(t *testing.T) { testBadRecvArgs(t, env(t)) })
	t.Run("TagWidth", func(t *testing.T) { testTagWidth(t, env(t)) })
	t.Run("Abort", func(t *testing.T) { testAbort(t, env) })
	t.Run("GarbageHandles", func(t *testing.T) { testGarbageHandles(t, env(t)) })
	if !c.noJunk {
		t.Run("JunkOnListener", func(t *testing.T) { testJunk(t, env(t), c.junk) })
	}
	t.Run("PeerDies", func(t *testing.T) { testPeerDies(t, env) })
	t.Run("ManyConnections", func(t *testing.T) { testMany(t, env(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, env(t)) })
}

func mustOpen(t *testing.T, open func(t *testing.T) net.Provider) net.Provider {
	t.Helper()
	p := open(t)
	if p == nil {
		t.Fatal("open returned no provider")
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Env is two providers, A the sender's host and B the receiver's.
type Env struct {
	T    *testing.T
	A, B net.Provider
}

// Pair connects A (sending) to a listener on B (receiving), both on device
// 0, and closes both sides when the test ends.
func (e *Env) Pair() (net.SendConn, net.RecvConn) {
	e.T.Helper()
	s, r, err := Connect(context.Background(), e.A, e.B)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { s.Close(); r.Close() })
	return s, r
}

// Connect opens a listener on to's device 0, connects from's device 0 to
// it and accepts, within opTimeout (or ctx's deadline); the listener is
// closed afterwards.
func Connect(ctx context.Context, from, to net.Provider) (net.SendConn, net.RecvConn, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	l, err := to.Listen(ctx, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	defer l.Close()
	type acc struct {
		r   net.RecvConn
		err error
	}
	ch := make(chan acc, 1)
	go func() {
		r, err := l.Accept(ctx)
		ch <- acc{r, err}
	}()
	s, err := from.Connect(ctx, 0, l.Handle())
	if err != nil {
		cancel()
		if a := <-ch; a.r != nil {
			a.r.Close()
		}
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	a := <-ch
	if a.err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("accept: %w", a.err)
	}
	return s, a.r, nil
}

// Pattern returns n bytes determined by seed: the PCG stream of
// testenv.Payload (linktest.Payload too), which PatternSum follows.
func Pattern(seed uint64, n int) []byte { return testenv.Payload(seed, n) }

var crcTable = crc64.MakeTable(crc64.ECMA)

// PatternSum is the CRC-64 of Pattern(seed, n), computed without keeping
// the pattern (so a 1 GiB check needs no second 1 GiB buffer).
func PatternSum(seed uint64, n int) uint64 {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var chunk [1 << 16]byte
	sum := uint64(0)
	for off := 0; off < n; off += len(chunk) {
		m := min(len(chunk), n-off)
		for i := 0; i < m; i += 8 {
			binary.LittleEndian.PutUint64(chunk[i:], r.Uint64())
		}
		sum = crc64.Update(sum, crcTable, chunk[:m])
	}
	return sum
}

// Check fails the test unless got holds Pattern(seed, len(got)).
func Check(t testing.TB, what string, got []byte, seed uint64) {
	t.Helper()
	if crc64Of(got) != PatternSum(seed, len(got)) {
		want := Pattern(seed, len(got))
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: byte %d of %d is %#x, want %#x", what, i, len(got), got[i], want[i])
			}
		}
	}
}

func crc64Of(b []byte) uint64 { return crc64.Checksum(b, crcTable) }

// Await waits for r within opTimeout and returns its outcome.
func Await(t testing.TB, r net.Request, what string) ([]int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sizes, err := r.Wait(ctx)
	if ctx.Err() != nil {
		if done, _, _ := r.Test(); !done {
			t.Fatalf("%s: not done after %v", what, opTimeout)
		}
	}
	return sizes, err
}

// AwaitOK waits for r and fails the test unless it succeeded.
func AwaitOK(t testing.TB, r net.Request, what string) []int {
	t.Helper()
	sizes, err := Await(t, r, what)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return sizes
}

// awaitFail waits up to limit for r to fail with an error wrapping want.
func awaitFail(t testing.TB, r net.Request, want error, limit time.Duration, what string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	_, err := r.Wait(ctx)
	if done, _, _ := r.Test(); !done {
		t.Fatalf("%s: still pending after %v", what, limit)
	}
	if err == nil || (want != nil && !errors.Is(err, want)) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, want)
	}
	return err
}

// Send posts an unregistered send and fails the test on a posting error.
func Send(t testing.TB, s net.SendConn, buf []byte, tag uint64) net.Request {
	t.Helper()
	r, err := s.ISend(buf, tag, nil)
	if err != nil {
		t.Fatalf("ISend of %d bytes: %v", len(buf), err)
	}
	return r
}

// Recv posts a receive and fails the test on a posting error.
func Recv(t testing.TB, r net.RecvConn, bufs [][]byte, tags []uint64) net.Request {
	t.Helper()
	q, err := r.IRecv(bufs, tags, nil)
	if err != nil {
		t.Fatalf("IRecv of %d buffers: %v", len(bufs), err)
	}
	return q
}

// failedReq is a request that failed when posted (ISend/IRecv returned an
// error), so tests of failure treat both styles alike.
type failedReq struct{ err error }

func (f failedReq) Test() (bool, []int, error)          { return true, nil, f.err }
func (f failedReq) Wait(context.Context) ([]int, error) { return nil, f.err }

func post(r net.Request, err error) net.Request { return orFailed(r, err) }

func orFailed(r net.Request, err error) net.Request {
	if err != nil {
		return failedReq{err}
	}
	return r
}
