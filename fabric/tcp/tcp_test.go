package tcp

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"flexlink/fabric"
	"flexlink/fabric/linktest"
	"flexlink/internal/settings"
)

func newJob() string {
	var b [6]byte
	rand.Read(b[:])
	return fmt.Sprintf("tcptest-%x", b)
}

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

// connectPair connects two endpoints from two goroutines, as two ranks do.
func connectPair(t testing.TB, ea, eb fabric.Endpoint) (a, b fabric.Link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		var err error
		b, err = eb.Connect(ctx, 0, ea.Address())
		errc <- err
	}()
	a, err := ea.Connect(ctx, 1, eb.Address())
	if berr := <-errc; err != nil || berr != nil {
		t.Fatalf("connect: rank 0: %v; rank 1: %v", err, berr)
	}
	return a, b
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
	return connectPair(t, newEndpoint(t, config(job, 0, env)), newEndpoint(t, config(job, 1, env)))
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
