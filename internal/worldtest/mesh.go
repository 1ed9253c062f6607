package worldtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/net/netlink"
	"github.com/flexlink/flexlink/fabric/shm"
	"github.com/flexlink/flexlink/internal/settings"
)

// The link transports Connect joins ranks with.
const (
	Fake = "fake" // fabric/fake: in memory, seeded delays, failures on demand
	Shm  = "shm"  // fabric/shm: shared-memory rings
	TCP  = "tcp"  // fabric/net/netlink's host TCP link on loopback
)

// MeshOptions tune Connect. Fake applies to the fake fabric; Env (the
// FLEXLINK_* settings the endpoints read) to shm and tcp.
type MeshOptions struct {
	Fake fake.Options
	Env  map[string]string
	// Timeout bounds connecting every pair (shm, tcp). 0: 30 s.
	Timeout time.Duration
}

// Mesh is n ranks of this process joined pairwise by links of one
// transport: Links[r][p] is rank r's link to rank p (nil for p == r).
// Links are FIFO and outlive their users, so one mesh can serve many
// communicators run one after the other.
type Mesh struct {
	N     int
	Links [][]fabric.Link
	// Net is the fake network (Kill, FailLink), nil on real links.
	Net *fake.Network
}

// Connect makes a mesh of n ranks over transport (Fake, Shm or TCP). For
// shm and tcp it makes each rank's endpoint, exchanges the addresses in
// memory (as the bootstrap would) and connects every pair from both sides
// at once; the test fails if any pair cannot connect. The links are closed
// when the test ends.
func Connect(t testing.TB, transport string, n int, o MeshOptions) *Mesh {
	t.Helper()
	if transport == Fake {
		return FakeMesh(n, o.Fake)
	}
	m := &Mesh{N: n, Links: make([][]fabric.Link, n)}
	var newEP func(fabric.EndpointConfig) (fabric.Endpoint, error)
	switch transport {
	case Shm:
		newEP = shm.NewEndpoint
	case TCP:
		newEP = func(c fabric.EndpointConfig) (fabric.Endpoint, error) { return netlink.NewTCPEndpoint(c) }
	default:
		t.Fatalf("worldtest: transport %q: want %s, %s or %s", transport, Fake, Shm, TCP)
	}
	job := fmt.Sprintf("mesh-%s-%d-%d", transport, n, time.Now().UnixNano())
	eps := make([]fabric.Endpoint, n)
	addrs := make([][]byte, n)
	for r := range n {
		ep, err := newEP(fabric.EndpointConfig{Rank: r, Size: n, JobID: job, Secret: []byte("secret of " + job),
			Host: "testhost", Comm: "mesh", Env: settings.Map(o.Env)})
		if err != nil {
			t.Fatalf("%s endpoint of rank %d: %v", transport, r, err)
		}
		defer ep.Close() // links stay when their endpoint closes
		eps[r], addrs[r] = ep, ep.Address()
	}
	for r := range n {
		m.Links[r] = make([]fabric.Link, n)
	}
	t.Cleanup(m.Close)
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n*n)
	for r := range n {
		for p := range n {
			if p == r {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.Links[r][p], errs[r*n+p] = eps[r].Connect(ctx, p, addrs[p])
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("connect %d ranks over %s: %v", n, transport, err)
	}
	return m
}

// FakeMesh is Connect on the fake fabric (it cannot fail, so it needs no
// test): n ranks on one fake.Network made with opt.
func FakeMesh(n int, opt fake.Options) *Mesh {
	m := &Mesh{N: n, Links: make([][]fabric.Link, n), Net: fake.NewNetwork(n, opt)}
	for r := range n {
		m.Links[r] = m.Net.Links(r)
	}
	return m
}

// Abort fails every link of the mesh with err (what the rank runtime does
// when a rank's call fails: the others fail instead of waiting). The mesh
// is spent afterwards.
func (m *Mesh) Abort(err error) {
	if m.Net != nil {
		m.Net.Abort(err)
		return
	}
	for _, row := range m.Links {
		for _, l := range row {
			if l != nil {
				l.Abort(err)
			}
		}
	}
}

// Close closes every link of the mesh (it may be called more than once).
func (m *Mesh) Close() {
	for _, row := range m.Links {
		for _, l := range row {
			if l != nil {
				l.Close()
			}
		}
	}
}
