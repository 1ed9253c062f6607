package shm

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

// newJob returns a job id unique to this test run.
func newJob() string {
	var b [6]byte
	rand.Read(b[:])
	return fmt.Sprintf("shmtest-%x", b)
}

func config(job string, rank int, env map[string]string) fabric.EndpointConfig {
	return fabric.EndpointConfig{
		Rank: rank, Size: 2, JobID: job, Secret: []byte("job secret " + job),
		Host: "testhost", Comm: "world", Env: settings.Map(env),
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

// newPair makes two connected links between goroutines of this process.
func newPair(t testing.TB, env map[string]string) (a, b fabric.Link) {
	t.Helper()
	job := newJob()
	ea, err := NewEndpoint(config(job, 0, env))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close() })
	eb, err := NewEndpoint(config(job, 1, env))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.Close() })
	return connectPair(t, ea, eb)
}

func TestConformance(t *testing.T) {
	for _, ring := range []string{"", "65536"} {
		t.Run("ring="+ring, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
				return newPair(t, map[string]string{"FLEXLINK_SHM_RING_BYTES": ring})
			})
		})
	}
}
