package nettest

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
)

// window is how many messages Throughput keeps in flight.
const window = 4

// Throughput connects from (device 0) to to (device 0), sends iters
// messages of size bytes with window of them in flight, and returns the
// bytes per second received. The first message's data is checked; the
// connection is closed afterwards. It needs no testing.T, so a bench tool
// can call it.
func Throughput(ctx context.Context, from, to net.Provider, size, iters int) (float64, error) {
	if size < 1 || iters < 1 {
		return 0, fmt.Errorf("throughput: size %d and iters %d must be positive", size, iters)
	}
	s, r, err := Connect(ctx, from, to)
	if err != nil {
		return 0, fmt.Errorf("throughput: %w", err)
	}
	defer s.Close()
	defer r.Close()
	msg := Pattern(1, size)
	bufs := make([][]byte, window)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	type pair struct{ s, r net.Request }
	wait := func(p pair) error {
		for _, q := range []net.Request{p.r, p.s} {
			if _, err := q.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	post := func(i int) (pair, error) {
		q, err := r.IRecv([][]byte{bufs[i%window]}, []uint64{uint64(i)}, nil)
		if err != nil {
			return pair{}, err
		}
		p, err := s.ISend(msg, uint64(i), nil)
		return pair{p, q}, err
	}
	// Warm up, and check the data path once.
	p, err := post(0)
	if err == nil {
		err = wait(p)
	}
	if err != nil {
		return 0, fmt.Errorf("throughput: first message: %w", err)
	}
	if !bytes.Equal(bufs[0], msg) {
		return 0, fmt.Errorf("throughput: first message arrived corrupted")
	}
	start := time.Now()
	var inflight []pair
	for i := 1; i <= iters; i++ {
		if len(inflight) == window {
			if err := wait(inflight[0]); err != nil {
				return 0, fmt.Errorf("throughput: message %d: %w", i-window, err)
			}
			inflight = inflight[1:]
		}
		p, err := post(i)
		if err != nil {
			return 0, fmt.Errorf("throughput: post %d: %w", i, err)
		}
		inflight = append(inflight, p)
	}
	for _, p := range inflight {
		if err := wait(p); err != nil {
			return 0, fmt.Errorf("throughput: %w", err)
		}
	}
	return float64(size) * float64(iters) / time.Since(start).Seconds(), nil
}
