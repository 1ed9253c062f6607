package proxy

import (
	"context"
	"fmt"
	"sync"
)

// CreditKey names a flow: one sender's traffic toward one destination host.
type CreditKey struct {
	Sender  int
	DstHost string
}

// Credits is the relay's flow control: per (sender, destination host) at
// most n staging slots are filled at once; a slot is written only after
// Acquire returned its credit, and Release returns it once the network
// send from it completed. Abort fails every waiting and later Acquire.
type Credits struct {
	n     int
	mu    sync.Mutex
	slots map[CreditKey]chan struct{}
	stop  chan struct{}
	err   error
}

// NewCredits gives every flow n credits (at least 1).
func NewCredits(n int) *Credits {
	return &Credits{n: max(n, 1), slots: map[CreditKey]chan struct{}{}, stop: make(chan struct{})}
}

func (c *Credits) flow(k CreditKey) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.slots[k]
	if ch == nil {
		ch = make(chan struct{}, c.n)
		for range c.n {
			ch <- struct{}{}
		}
		c.slots[k] = ch
	}
	return ch
}

// Acquire takes one credit of flow k, waiting for one to come back.
func (c *Credits) Acquire(ctx context.Context, k CreditKey) error {
	select {
	case <-c.flow(k):
		return nil
	case <-c.stop:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("credit for rank %d to host %s: %w", k.Sender, k.DstHost, context.Cause(ctx))
	}
}

// Release returns one credit of flow k.
func (c *Credits) Release(k CreditKey) {
	select {
	case c.flow(k) <- struct{}{}:
	default:
		panic(fmt.Sprintf("proxy: credit of rank %d to host %s released twice", k.Sender, k.DstHost))
	}
}

// Available reports the credits flow k holds now (tests).
func (c *Credits) Available(k CreditKey) int { return len(c.flow(k)) }

// Abort fails every waiting and later Acquire with err.
func (c *Credits) Abort(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.stop)
	}
}
