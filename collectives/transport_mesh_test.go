package collectives_test

// Real host links between goroutine ranks of this process, for the
// transport sweep: worldtest.Connect makes each transport's endpoints,
// exchanges their addresses in memory and connects every pair.

import (
	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// transports are the real host links the transport sweep runs over. The
// shm rings get the smallest allowed size, so large messages wrap around
// them many times; tcp stripes large messages over two loopback sockets.
var transports = []struct {
	name string
	opt  worldtest.MeshOptions
}{
	{worldtest.Shm, worldtest.MeshOptions{Env: map[string]string{"FLEXLINK_SHM_RING_BYTES": "65536"}}},
	{worldtest.TCP, worldtest.MeshOptions{Env: map[string]string{"FLEXLINK_SOCKET_IFNAME": "lo", "FLEXLINK_SOCKETS_PER_PEER": "2"}}},
}

// meshWorld is a communicator with id comm, every rank with cfg, over m.
func meshWorld(m *worldtest.Mesh, comm uint64, cfg collectives.Config) *world {
	return onMesh(m, comm, func(int) collectives.Config { return cfg })
}
