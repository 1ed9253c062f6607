package rank

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/settings"
)

// world starts n ranks in this process over an in-process bootstrap and the
// real host transports (shm or tcp, by transport), runs body on each, and
// returns each rank's error.
func runWorld(t *testing.T, n int, transport string, body func(c *Comm) error) []error {
	t.Helper()
	return runWorldEnv(t, n, map[string]string{"FLEXLINK_TRANSPORT": transport, "FLEXLINK_CHUNK_BYTES": "8192"}, body)
}

func runWorldEnv(t *testing.T, n int, vars map[string]string, body func(c *Comm) error) []error {
	t.Helper()
	return runWorldHosts(t, n, vars, func(int) string { return "testhost" }, body)
}

// runWorldHosts is runWorldEnv with rank r on host hostOf(r) (ranks with
// different host names talk as if on different machines).
func runWorldHosts(t *testing.T, n int, vars map[string]string, hostOf func(r int) string, body func(c *Comm) error) []error {
	t.Helper()
	stores := bootstrap.NewInProc(n)
	env := settings.Map(vars)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job := fmt.Sprintf("t%d", time.Now().UnixNano())
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := New(ctx, stores[r], Options{Env: env, Host: hostOf(r), JobID: job, Secret: []byte("secret")})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = body(c)
			c.Close()
		}(r)
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestCollectivesOverRealTransports(t *testing.T) {
	for _, tr := range []string{"shm", "tcp", "net"} {
		for _, n := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/n%d", tr, n), func(t *testing.T) {
				noErrors(t, runWorld(t, n, tr, func(c *Comm) error {
					ctx := context.Background()
					const count = 10007
					x := make([]float64, count)
					for i := range x {
						x[i] = float64(c.Rank()*count + i)
					}
					if err := c.AllReduce(ctx, Of(x), Of(x), dtype.Sum); err != nil {
						return err
					}
					for i, v := range x {
						want := 0.0
						for r := 0; r < n; r++ {
							want += float64(r*count + i)
						}
						if v != want {
							return fmt.Errorf("allreduce element %d = %v, want %v", i, v, want)
						}
					}
					mine := []int32{int32(c.Rank() * 10), int32(c.Rank()*10 + 1)}
					all := make([]int32, 2*n)
					if err := c.AllGather(ctx, Of(mine), Of(all)); err != nil {
						return err
					}
					for r := 0; r < n; r++ {
						if all[2*r] != int32(r*10) || all[2*r+1] != int32(r*10+1) {
							return fmt.Errorf("allgather block %d = %v", r, all[2*r:2*r+2])
						}
					}
					b := make([]int64, 5)
					if c.Rank() == n-1 {
						for i := range b {
							b[i] = int64(100 + i)
						}
					}
					if err := c.Broadcast(ctx, Of(b), Of(b), n-1); err != nil {
						return err
					}
					if b[4] != 104 {
						return fmt.Errorf("broadcast got %v", b)
					}
					return c.Barrier(ctx)
				}))
			})
		}
	}
}

func TestSplitOrdersByKeyThenRank(t *testing.T) {
	const n = 6
	type got struct{ rank, size int }
	res := make([]got, n)
	noErrors(t, runWorld(t, n, "shm", func(c *Comm) error {
		ctx := context.Background()
		color := c.Rank() % 2 // evens and odds
		if c.Rank() == 5 {
			color = NoColor
		}
		key := -c.Rank() // reverse order inside each color
		sub, err := c.Split(ctx, color, key)
		if err != nil {
			return err
		}
		if c.Rank() == 5 {
			if sub != nil {
				return errors.New("NoColor got a communicator")
			}
			return nil
		}
		defer sub.Close()
		res[c.Rank()] = got{sub.Rank(), sub.Size()}
		// The sum over the sub-communicator names exactly its members.
		x := []int64{int64(c.Rank())}
		if err := sub.AllReduce(ctx, Of(x), Of(x), dtype.Sum); err != nil {
			return err
		}
		want := map[int]int64{0: 0 + 2 + 4, 1: 1 + 3}[color]
		if x[0] != want {
			return fmt.Errorf("sub allreduce = %d, want %d", x[0], want)
		}
		return nil
	}))
	want := []got{{2, 3}, {1, 2}, {1, 3}, {0, 2}, {0, 3}, {0, 0}}
	for r := 0; r < 5; r++ {
		if res[r] != want[r] {
			t.Errorf("rank %d: sub rank/size %v, want %v", r, res[r], want[r])
		}
	}
}

// Two sibling sub-communicators and their parent run collectives at the
// same time from different goroutines; each result must be its own.
func TestConcurrentSubCommunicatorsDoNotCrossTalk(t *testing.T) {
	const n = 4
	noErrors(t, runWorld(t, n, "shm", func(c *Comm) error {
		ctx := context.Background()
		a, err := c.Split(ctx, c.Rank()/2, c.Rank())
		if err != nil {
			return err
		}
		defer a.Close()
		b, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			return err
		}
		defer b.Close()
		var wg sync.WaitGroup
		errc := make(chan error, 3)
		for i, cm := range []*Comm{c, a, b} {
			wg.Add(1)
			go func(i int, cm *Comm) {
				defer wg.Done()
				for it := 0; it < 20; it++ {
					x := make([]float32, 3000)
					for j := range x {
						x[j] = float32(1000*i + c.Rank())
					}
					if err := cm.AllReduce(ctx, Of(x), Of(x), dtype.Max); err != nil {
						errc <- err
						return
					}
					// The max over this communicator's members.
					want := float32(-1)
					for r := 0; r < n; r++ {
						member := i == 0 || (i == 1 && r/2 == c.Rank()/2) || (i == 2 && r%2 == c.Rank()%2)
						if member {
							want = max(want, float32(1000*i+r))
						}
					}
					if x[0] != want || x[2999] != want {
						errc <- fmt.Errorf("comm %d iteration %d: got %v, want %v", i, it, x[0], want)
						return
					}
				}
			}(i, cm)
		}
		wg.Wait()
		close(errc)
		return <-errc
	}))
}

// Ranks that call different collectives end with ErrMismatch on every rank,
// and the message names what differs.
func TestMismatchFailsEveryRank(t *testing.T) {
	const n = 3
	start := time.Now()
	errs := runWorld(t, n, "shm", func(c *Comm) error {
		count := 1000
		if c.Rank() == 1 {
			count = 999
		}
		x := make([]float32, count)
		return c.AllReduce(context.Background(), Of(x), Of(x), dtype.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("rank %d: got %v, want ErrMismatch", r, err)
		} else if !strings.Contains(err.Error(), "999") {
			t.Errorf("rank %d: error does not say what differs: %v", r, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("mismatch took %v to surface", d)
	}
}

// A rank that disappears mid-collective (its bootstrap connection and links
// gone) makes every other rank fail with ErrPeerLost within 2 s.
func TestPeerLossFailsSurvivors(t *testing.T) {
	const n = 3
	stores := bootstrap.NewInProc(n)
	env := settings.Map(map[string]string{"FLEXLINK_TRANSPORT": "shm"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	comms := make([]*Comm, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := New(ctx, stores[r], Options{Env: env, Host: "h", JobID: fmt.Sprintf("lost%d", time.Now().UnixNano()), Secret: []byte("s")})
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
			comms[r] = c
		}(r)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	errc := make(chan error, n-1)
	for r := 0; r < n-1; r++ {
		go func(r int) {
			x := make([]float64, 1<<16)
			errc <- comms[r].AllReduce(ctx, Of(x), Of(x), dtype.Sum)
		}(r)
	}
	// Rank n-1 never joins the allreduce and then vanishes.
	lostAt := time.Now()
	comms[n-1].c.AbortLinks(errors.New("simulated crash"))
	if err := bootstrap.LoseInProc(stores[n-1]); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < n-1; r++ {
		err := <-errc
		if !errors.Is(err, ErrPeerLost) {
			t.Errorf("survivor: got %v, want ErrPeerLost", err)
		}
	}
	if d := time.Since(lostAt); d > 2*time.Second {
		t.Errorf("survivors noticed after %v, want < 2s", d)
	}
	for _, c := range comms[:n-1] {
		c.Close()
	}
}

func TestArgumentErrors(t *testing.T) {
	noErrors(t, runWorld(t, 2, "shm", func(c *Comm) error {
		ctx := context.Background()
		a, b := make([]float32, 4), make([]float64, 4)
		if err := c.AllReduce(ctx, Of(a), Of(b), dtype.Sum); err == nil {
			return errors.New("dtype mismatch accepted")
		}
		if err := c.AllGather(ctx, Of(a), Of(a)); err == nil {
			return errors.New("short allgather recv accepted")
		}
		if err := c.Broadcast(ctx, Of(a), Of(a), 7); err == nil {
			return errors.New("bad root accepted")
		}
		if err := c.Send(ctx, Of(a), c.Rank()); err == nil {
			return errors.New("send to self accepted")
		}
		// The communicator still works after rejected arguments.
		return c.AllReduce(ctx, Of(a), Of(a), dtype.Sum)
	}))
}

// FLEXLINK_LINKS=shm,tcp joins each pair with both host links at once (a
// FlexLink multi-link channel); results must not change.
func TestMultiLinkHostCollectives(t *testing.T) {
	const n = 3
	kinds := make([][]string, n)
	noErrors(t, runWorldEnv(t, n, map[string]string{"FLEXLINK_LINKS": "shm,tcp", "FLEXLINK_CHUNK_BYTES": "1048576"}, func(c *Comm) error {
		ctx := context.Background()
		for it := 0; it < 3; it++ {
			x := make([]float32, 3<<20)
			for i := range x {
				x[i] = float32(c.Rank() + i%5)
			}
			if err := c.AllReduce(ctx, Of(x), Of(x), dtype.Sum); err != nil {
				return err
			}
			for i, v := range x {
				if want := float32(0+1+2) + float32(n*(i%5)); v != want {
					return fmt.Errorf("iteration %d element %d = %v, want %v", it, i, v, want)
				}
			}
		}
		for _, l := range c.Links() {
			kinds[c.Rank()] = append(kinds[c.Rank()], l.Kind)
		}
		return nil
	}))
	for r, ks := range kinds {
		if len(ks) == 0 {
			t.Errorf("rank %d reports no links", r)
		}
		for _, k := range ks {
			if k != "multi" {
				t.Errorf("rank %d: link kind %q, want multi", r, k)
			}
		}
	}
}

// A ring shift that sends and receives the same buffer (in place) must
// still deliver the neighbour's original data.
func TestGroupInPlaceRingShift(t *testing.T) {
	const n, count = 3, 1 << 17
	noErrors(t, runWorld(t, n, "tcp", func(c *Comm) error {
		x := make([]int32, count)
		for i := range x {
			x[i] = int32(c.Rank()*count + i)
		}
		me := c.Rank()
		if err := c.Group(context.Background(), SendTo((me+1)%n, Of(x)), RecvFrom((me+n-1)%n, Of(x))); err != nil {
			return err
		}
		from := (me + n - 1) % n
		for i, v := range x {
			if v != int32(from*count+i) {
				return fmt.Errorf("element %d = %d, want %d", i, v, from*count+i)
			}
		}
		return nil
	}))
}
