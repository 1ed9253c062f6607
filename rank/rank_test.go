package rank

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// smallChunks makes the host collectives cut messages into 8 KiB chunks,
// so small data runs through the multi-chunk paths.
var smallChunks = map[string]string{"FLEXLINK_CHUNK_BYTES": "8192"}

func TestCollectivesOverRealTransports(t *testing.T) {
	for _, tr := range []string{"shm", "tcp", "net"} {
		for _, n := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/n%d", tr, n), func(t *testing.T) {
				worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Transport: tr, Env: smallChunks}, New, func(c *Comm) error {
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
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Transport: "shm", Env: smallChunks}, New, func(c *Comm) error {
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
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Transport: "shm", Env: smallChunks}, New, func(c *Comm) error {
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
	errs := worldtest.Run(t, worldtest.Spec{N: n, Transport: "shm", Env: smallChunks}, New, func(c *Comm) error {
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := worldtest.Start(t, worldtest.Spec{N: n, Transport: "shm"}, New)
	comms := w.Comms
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
	if err := w.Lose(n - 1); err != nil {
		t.Fatal(err)
	}
	comms[n-1] = nil // gone: the cleanup skips it
	for r := 0; r < n-1; r++ {
		err := <-errc
		if !errors.Is(err, ErrPeerLost) {
			t.Errorf("survivor: got %v, want ErrPeerLost", err)
		}
	}
	if d := time.Since(lostAt); d > 2*time.Second {
		t.Errorf("survivors noticed after %v, want < 2s", d)
	}
}

func TestArgumentErrors(t *testing.T) {
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: 2, Transport: "shm", Env: smallChunks}, New, func(c *Comm) error {
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
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: map[string]string{"FLEXLINK_LINKS": "shm,tcp", "FLEXLINK_CHUNK_BYTES": "1048576"}}, New, func(c *Comm) error {
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
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Transport: "tcp", Env: smallChunks}, New, func(c *Comm) error {
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
