package linktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

// Helpers that the tests of the host transports share.

// NewJob returns a job id unique to this test run: prefix, a dash and
// random hex.
func NewJob(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%x", prefix, b)
}

// EndpointConfig is rank's endpoint config in the two-rank job job, on
// host, with env's settings.
func EndpointConfig(job string, rank int, host string, env map[string]string) fabric.EndpointConfig {
	return fabric.EndpointConfig{
		Rank: rank, Size: 2, JobID: job, Secret: []byte("job secret " + job),
		Host: host, Comm: "world", Env: settings.Map(env),
	}
}

// LogBuffer collects log output from several goroutines.
type LogBuffer = testenv.SyncBuffer

// ConnectPair connects two endpoints (ranks 0 and 1) from two goroutines,
// as two ranks do.
func ConnectPair(t testing.TB, ea, eb fabric.Endpoint) (a, b fabric.Link) {
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

// ConnectHelper starts a helper process (StartHelper with test, transport
// and env) as rank 1 and connects ep, rank 0's endpoint, to it. The link is
// closed when the test ends.
func ConnectHelper(t testing.TB, ep fabric.Endpoint, test, transport string, env ...string) (*Proc, fabric.Link) {
	p := StartHelper(t, test, transport, env...)
	addr, err := hex.DecodeString(p.Expect(t, "addr"))
	if err != nil {
		t.Fatal(err)
	}
	p.Tell(t, "addr %x", ep.Address())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := ep.Connect(ctx, 1, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p.Expect(t, "ready")
	return p, l
}
