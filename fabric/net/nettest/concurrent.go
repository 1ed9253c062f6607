package nettest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
)

// testMany runs several connections both ways between the two providers
// at once, each from its own goroutines.
func testMany(t *testing.T, e *Env) {
	const conns, msgs = 8, 24
	type link struct {
		s net.SendConn
		r net.RecvConn
	}
	links := make([]link, conns)
	for i := range links {
		from, to := e.A, e.B
		if i%2 == 1 {
			from, to = e.B, e.A
		}
		s, r, err := Connect(context.Background(), from, to)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { s.Close(); r.Close() })
		links[i] = link{s, r}
	}
	size := func(c, m int) int { return (c*1000003 + m*7919) % (300 << 10) }
	seed := func(c, m int) uint64 { return uint64(c<<16 | m) }
	errc := make(chan error, 2*conns)
	var wg sync.WaitGroup
	for c, l := range links {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for m := range msgs {
				q, err := l.s.ISend(Pattern(seed(c, m), size(c, m)), uint64(m), nil)
				if err == nil {
					_, err = waitFor(q)
				}
				if err != nil {
					errc <- fmt.Errorf("connection %d send %d: %w", c, m, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for m := range msgs {
				got := make([]byte, size(c, m))
				q, err := l.r.IRecv([][]byte{got}, []uint64{uint64(m)}, nil)
				if err == nil {
					_, err = waitFor(q)
				}
				if err == nil && PatternSumOf(got) != PatternSum(seed(c, m), len(got)) {
					err = fmt.Errorf("data differs from the pattern")
				}
				if err != nil {
					errc <- fmt.Errorf("connection %d recv %d: %w", c, m, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// testConcurrent: four goroutines send on one connection (ordering their
// calls with a lock, as the contract asks), one receives, and another
// polls Test on every request meanwhile.
func testConcurrent(t *testing.T, e *Env) {
	s, r := e.Pair()
	const n = 400
	size := func(i int) int { return (i * 104729) % (130 << 10) }
	var (
		mu    sync.Mutex
		next  int
		sends = make([]net.Request, n)
	)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				if i == n {
					mu.Unlock()
					return
				}
				next++
				q, err := s.ISend(Pattern(uint64(i), size(i)), uint64(i), nil)
				sends[i] = orFailed(q, err)
				mu.Unlock()
			}
		}()
	}
	recvs := make([]net.Request, n)
	got := make([][]byte, n)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		deadline := time.Now().Add(opTimeout)
		for time.Now().Before(deadline) {
			all := true
			for i := range n {
				mu.Lock()
				q := sends[i]
				mu.Unlock()
				if q == nil {
					all = false
					continue
				}
				if done, _, _ := q.Test(); !done {
					all = false
				}
			}
			if all {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for i := range n {
		got[i] = make([]byte, size(i))
		recvs[i] = Recv(t, r, [][]byte{got[i]}, []uint64{uint64(i)})
	}
	wg.Wait()
	for i := range n {
		AwaitOK(t, recvs[i], fmt.Sprintf("recv %d", i))
		Check(t, fmt.Sprintf("message %d", i), got[i], uint64(i))
		AwaitOK(t, sends[i], fmt.Sprintf("send %d", i))
	}
	<-polled
}

func waitFor(q net.Request) ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return q.Wait(ctx)
}

// PatternSumOf is the checksum Check compares with PatternSum.
func PatternSumOf(b []byte) uint64 { return crc64Of(b) }
