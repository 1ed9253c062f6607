package collectives_test

// Real host links between goroutine ranks of this process, for the
// transport sweep: endpoints made with shm.NewEndpoint / netlink.NewTCPEndpoint,
// addresses exchanged in memory, every pair connected from both sides.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net/netlink"
	"github.com/flexlink/flexlink/fabric/shm"
	"github.com/flexlink/flexlink/internal/settings"
)

// transports are the real host links the transport sweep runs over. The
// shm rings get the smallest allowed size, so large messages wrap around
// them many times; tcp stripes large messages over two loopback sockets.
var transports = []struct {
	name string
	new  func(fabric.EndpointConfig) (fabric.Endpoint, error)
	env  map[string]string
}{
	{"shm", shm.NewEndpoint, map[string]string{"FLEXLINK_SHM_RING_BYTES": "65536"}},
	{"tcp", func(c fabric.EndpointConfig) (fabric.Endpoint, error) { return netlink.NewTCPEndpoint(c) }, map[string]string{"FLEXLINK_SOCKET_IFNAME": "lo", "FLEXLINK_SOCKETS_PER_PEER": "2"}},
}

// mesh is n goroutine ranks of this process joined pairwise by real links
// of one transport: links[r][p] is rank r's link to rank p (nil for p ==
// r). Links are FIFO and outlive engines, so one mesh serves many cases run
// one after the other, each with its own engines and communicator id.
type mesh struct {
	n     int
	links [][]fabric.Link
	close func()
}

// connectMesh makes the endpoints of n ranks, exchanges their addresses in
// memory (as the bootstrap would), and connects every pair from both sides
// at once.
func connectMesh(t testing.TB, kind string, n int, newEP func(fabric.EndpointConfig) (fabric.Endpoint, error), env map[string]string) *mesh {
	t.Helper()
	job := fmt.Sprintf("sweep-%s-%d-%d", kind, n, time.Now().UnixNano())
	eps := make([]fabric.Endpoint, n)
	addrs := make([][]byte, n)
	for r := range n {
		ep, err := newEP(fabric.EndpointConfig{Rank: r, Size: n, JobID: job, Secret: []byte("secret of " + job),
			Host: "testhost", Comm: "sweep", Env: settings.Map(env)})
		if err != nil {
			t.Fatalf("%s endpoint of rank %d: %v", kind, r, err)
		}
		defer ep.Close() // links stay when their endpoint closes
		eps[r], addrs[r] = ep, ep.Address()
	}
	m := &mesh{n: n, links: make([][]fabric.Link, n)}
	for r := range n {
		m.links[r] = make([]fabric.Link, n)
	}
	m.close = func() {
		for _, row := range m.links {
			for _, l := range row {
				if l != nil {
					l.Close()
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
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
				m.links[r][p], errs[r*n+p] = eps[r].Connect(ctx, p, addrs[p])
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		m.close()
		t.Fatalf("connect %d ranks over %s: %v", n, kind, err)
	}
	return m
}

// world returns a communicator over the mesh with its own id. A rank whose
// call fails aborts every link of the mesh (the rank runtime aborts the
// job), so the others fail instead of waiting; the mesh is then spent.
func (m *mesh) world(comm uint64, cfg collectives.Config) *world {
	w := &world{n: m.n, abort: func(err error) {
		for _, row := range m.links {
			for _, l := range row {
				if l != nil {
					l.Abort(err)
				}
			}
		}
	}}
	for r := range m.n {
		p := collectives.NewLinkPeers(r, m.n, m.links[r])
		w.engines = append(w.engines, collectives.NewEngine(comm, p, collectives.HostMemory{}, cfg))
	}
	return w
}
