package tcp

import (
	"fmt"
	"testing"

	"flexlink/fabric"
	"flexlink/fabric/linktest"
	"flexlink/internal/settings"
)

func newJob() string { return linktest.NewJob("tcptest") }

// config makes rank's endpoint config on loopback; env adds settings.
func config(job string, rank int, env map[string]string) fabric.EndpointConfig {
	m := map[string]string{"FLEXLINK_SOCKET_IFNAME": "lo"}
	for k, v := range env {
		m[k] = v
	}
	return fabric.EndpointConfig{
		Rank: rank, Size: 2, JobID: job, Secret: []byte("job secret " + job),
		Host: fmt.Sprintf("host%d", rank), Comm: "world", Env: settings.Map(m),
	}
}

func newEndpoint(t testing.TB, cfg fabric.EndpointConfig) fabric.Endpoint {
	t.Helper()
	e, err := NewEndpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// newPair makes two connected links between goroutines of this process.
func newPair(t testing.TB, env map[string]string) (a, b fabric.Link) {
	t.Helper()
	job := newJob()
	return linktest.ConnectPair(t, newEndpoint(t, config(job, 0, env)), newEndpoint(t, config(job, 1, env)))
}

func TestConformance(t *testing.T) {
	for _, socks := range []string{"1", "2", "3"} {
		t.Run("sockets="+socks, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
				return newPair(t, map[string]string{"FLEXLINK_SOCKETS_PER_PEER": socks})
			})
		})
	}
}
