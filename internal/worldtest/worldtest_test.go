package worldtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// TestRunPlacesRanks: every rank gets a communicator of the spec's size
// on the host Host names, with Env and its own RankEnv settings, over
// each comm-level transport.
func TestRunPlacesRanks(t *testing.T) {
	for _, tr := range []string{"shm", "tcp", "net", "auto"} {
		t.Run(tr, func(t *testing.T) {
			const n = 4
			host, hostOf := worldtest.PerHost(2), func(r int) string { return fmt.Sprint("host", r/2) }
			if tr == "shm" { // shm joins ranks of one host only
				host, hostOf = nil, func(int) string { return "testhost" }
			}
			spec := worldtest.Spec{N: n, Transport: tr, Host: host,
				Env: map[string]string{"FLEXLINK_TIMEOUT": "45s"},
				RankEnv: func(r int) map[string]string {
					return map[string]string{"FLEXLINK_CHUNK_BYTES": fmt.Sprint(4096 * (r + 1))}
				}}
			seen := make([]bool, n)
			worldtest.NoErrors(t, worldtest.Run(t, spec, comm.New, func(c *comm.Comm) error {
				r := c.Rank()
				seen[r] = true
				if c.Size() != n {
					return fmt.Errorf("size %d, want %d", c.Size(), n)
				}
				if want := hostOf(r); c.Host() != want {
					return fmt.Errorf("host %q, want %q", c.Host(), want)
				}
				env := c.Env()
				if got := env.String("FLEXLINK_TRANSPORT"); got != tr {
					return fmt.Errorf("FLEXLINK_TRANSPORT=%q, want %q", got, tr)
				}
				if got := env.String("FLEXLINK_TIMEOUT"); got != "45s" {
					return fmt.Errorf("FLEXLINK_TIMEOUT=%q, want 45s", got)
				}
				if got, want := env.String("FLEXLINK_CHUNK_BYTES"), fmt.Sprint(4096*(r+1)); got != want {
					return fmt.Errorf("FLEXLINK_CHUNK_BYTES=%q, want %q", got, want)
				}
				return barrier(context.Background(), c)
			}))
			for r, ok := range seen {
				if !ok {
					t.Errorf("rank %d's body never ran", r)
				}
			}
		})
	}
}

// barrier is one barrier on c, through its call queue.
func barrier(ctx context.Context, c *comm.Comm) error {
	return c.Run(ctx, "barrier", func(ctx context.Context) error { return c.Engine().Barrier(ctx) })
}

// TestRunReportsErrors: a world that cannot open reports each rank's
// opening error; a body's error is its rank's.
func TestRunReportsErrors(t *testing.T) {
	errs := worldtest.Run(t, worldtest.Spec{N: 2, Transport: "carrier-pigeon"}, comm.New, func(*comm.Comm) error {
		return errors.New("body ran on a world that cannot open")
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "carrier-pigeon") {
			t.Errorf("rank %d: %v, want the transport refused", r, err)
		}
	}
	bad := errors.New("rank 1 says no")
	errs = worldtest.Run(t, worldtest.Spec{N: 3, Transport: "shm"}, comm.New, func(c *comm.Comm) error {
		if c.Rank() == 1 {
			return bad
		}
		return nil
	})
	for r, err := range errs {
		if (r == 1) != errors.Is(err, bad) || (r != 1 && err != nil) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// recorder is a testing.TB that keeps what Errorf says.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestRunReportsHang: ranks whose bodies do not return within Hang fail
// the test and get an error naming them; Run does not wait for them. A
// rank whose body returned keeps its error (its Close waits for the
// others: it is reported as closing).
func TestRunReportsHang(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	rec := &recorder{TB: t}
	errs := worldtest.Run(rec, worldtest.Spec{N: 3, Transport: "shm", Hang: time.Second}, comm.New, func(c *comm.Comm) error {
		if c.Rank() == 0 {
			return errors.New("rank 0 returns at once")
		}
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		return nil
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "at once") || !strings.Contains(errs[0].Error(), "rank 0 of 3 still closing") {
		t.Errorf("rank 0: %v, want its own error, still closing", errs[0])
	}
	for r := 1; r < 3; r++ {
		if want := fmt.Sprintf("rank %d of 3 still running after 1s", r); errs[r] == nil || !strings.Contains(errs[r].Error(), want) {
			t.Errorf("rank %d: %v, want %q", r, errs[r], want)
		}
	}
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "ranks [0 1 2] of 3 still running or closing") {
		t.Errorf("the test was told %q, want one hang naming every rank", rec.errors)
	}
}

// TestStartLose: Start opens every rank; a rank lost from a store that
// keeps going fails the others' calls with ErrPeerLost, and the cleanup
// skips the rank the test let go.
func TestStartLose(t *testing.T) {
	const n, lost = 3, 2
	w := worldtest.Start(t, worldtest.Spec{N: n, Transport: "tcp", KeepOnLoss: true}, comm.New)
	if len(w.Comms) != n {
		t.Fatalf("%d communicators, want %d", len(w.Comms), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	worldtest.NoErrors(t, worldtest.Each(w.Comms, func(_ int, c *comm.Comm) error { return barrier(ctx, c) }))
	w.Comms[lost].AbortLinks(errors.New("simulated crash"))
	if err := w.Lose(lost); err != nil {
		t.Fatal(err)
	}
	w.Comms[lost] = nil
	errs := worldtest.Each(w.Comms, func(_ int, c *comm.Comm) error { return barrier(ctx, c) })
	for r, err := range errs {
		if r != lost && err == nil {
			t.Errorf("rank %d: a barrier without rank %d succeeded", r, lost)
		}
	}
}

// TestConnect: every pair of a mesh exchanges a message in both
// directions over each link transport, each byte checked.
func TestConnect(t *testing.T) {
	for _, tr := range []string{worldtest.Fake, worldtest.Shm, worldtest.TCP} {
		t.Run(tr, func(t *testing.T) {
			const n = 3
			m := worldtest.Connect(t, tr, n, worldtest.MeshOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			msg := func(from, to int) []byte { return []byte(fmt.Sprintf("from %d to %d over %s", from, to, tr)) }
			var reqs []fabric.Request
			got := map[[2]int][]byte{}
			for r := range n {
				for p := range n {
					if p == r {
						if m.Links[r][p] != nil {
							t.Fatalf("rank %d has a link to itself", r)
						}
						continue
					}
					buf := make([]byte, len(msg(p, r)))
					got[[2]int{p, r}] = buf
					reqs = append(reqs, m.Links[r][p].Send(fabric.Tag{7}, msg(r, p)), m.Links[r][p].Recv(fabric.Tag{7}, buf))
				}
			}
			for _, q := range reqs {
				if err := q.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for k, b := range got {
				if want := msg(k[0], k[1]); string(b) != string(want) {
					t.Errorf("rank %d got %q from %d, want %q", k[1], b, k[0], want)
				}
			}
		})
	}
}
