package collectives_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// hangLimit bounds every multi-rank run: a collective that has not
// returned by then is reported as a hang (the test fails; nothing blocks
// the test binary).
const hangLimit = 30 * time.Second

// world is a communicator of n goroutine ranks over a worldtest mesh: the
// fake network (nw, for Kill and FailLink) or real links (nw nil: see
// transport_sweep_test.go).
type world struct {
	n       int
	nw      *fake.Network
	engines []*collectives.Engine
	// abort fails every link of the world (nw.Abort on the fake network).
	abort func(error)
}

func newWorld(n int, opt fake.Options, cfg collectives.Config) *world {
	return newWorldCfg(n, opt, func(int) collectives.Config { return cfg })
}

// newWorldCfg gives every rank its own Config (for mismatch tests).
func newWorldCfg(n int, opt fake.Options, cfg func(rank int) collectives.Config) *world {
	return onMesh(worldtest.FakeMesh(n, opt), 0xc0ffee, cfg)
}

// onMesh makes a communicator with id comm over m's links, rank r with
// Config cfg(r). A rank whose call fails aborts every link of the mesh
// (the rank runtime aborts the job), so the others fail instead of
// waiting; the mesh is then spent. Links outlive engines, so one mesh
// serves many communicators run one after the other.
func onMesh(m *worldtest.Mesh, comm uint64, cfg func(rank int) collectives.Config) *world {
	w := &world{n: m.N, nw: m.Net, abort: m.Abort}
	for r := range m.N {
		p := collectives.NewLinkPeers(r, m.N, m.Links[r])
		w.engines = append(w.engines, collectives.NewEngine(comm, p, collectives.HostMemory{}, cfg(r)))
	}
	return w
}

// run calls fn on every rank at once and returns each rank's error. It
// emulates the rank runtime: the first rank whose fn fails aborts the job
// (Network.Abort with its error, as bootstrap.Store.Abort delivers it to
// every rank), so the others fail too instead of waiting. Ranks for which
// silent(rank) is true (killed ones: a dead process reports nothing) do
// not abort the job.
func (w *world) run(t testing.TB, silent func(int) bool, fn func(ctx context.Context, r int, e *collectives.Engine) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	errs := make([]error, w.n)
	var wg sync.WaitGroup
	for r := range w.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(ctx, r, w.engines[r])
			if errs[r] != nil && (silent == nil || !silent(r)) {
				w.abort(fmt.Errorf("job aborted by rank %d: %w", r, errs[r]))
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Errorf("a rank was still running after %v (hang): %v", hangLimit, errs)
	}
	return errs
}

func noSilent(int) bool { return false }
