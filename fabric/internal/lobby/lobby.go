// Package lobby is the listening side that the host transports (shm, tcp)
// share: an accept loop that runs each incoming connection's handshake,
// and the place where proven dialers wait until this rank's Connect for
// their rank takes them.
package lobby

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// Lobby tracks, for one endpoint, the connections in their handshake
// (C) and the proven arrivals (A) by dialing rank.
type Lobby[C interface {
	comparable
	Close() error
}, A any] struct {
	mu        sync.Mutex
	arrived   map[int]A
	changed   chan struct{} // closed and replaced when arrived changes
	used      map[int]bool  // peers Connect was called for
	shaking   map[C]bool
	closed    bool
	handshake sync.WaitGroup
}

// New returns an open, empty lobby.
func New[C interface {
	comparable
	Close() error
}, A any]() *Lobby[C, A] {
	return &Lobby[C, A]{arrived: map[int]A{}, changed: make(chan struct{}), used: map[int]bool{}, shaking: map[C]bool{}}
}

// Claim records that Connect was called for peer. It fails when the lobby
// is closed or peer was claimed before; what starts the error, e.g.
// "connect rank 0 to rank 1 over tcp".
func (lb *Lobby[C, A]) Claim(peer int, what string) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	switch {
	case lb.closed:
		return fmt.Errorf("%s: endpoint %w", what, errs.ErrClosed)
	case lb.used[peer]:
		return fmt.Errorf("%s: already connected", what)
	}
	lb.used[peer] = true
	return nil
}

// Await waits until peer's arrival is there and ready says it is complete,
// takes it out of the lobby and returns it.
func (lb *Lobby[C, A]) Await(ctx context.Context, peer int, ready func(A) bool) (A, error) {
	var zero A
	for {
		lb.mu.Lock()
		if lb.closed {
			lb.mu.Unlock()
			return zero, fmt.Errorf("endpoint %w", errs.ErrClosed)
		}
		a, ok := lb.arrived[peer]
		changed := lb.changed
		if ok && ready(a) {
			delete(lb.arrived, peer)
			lb.mu.Unlock()
			return a, nil
		}
		lb.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return zero, fmt.Errorf("waiting for rank %d to dial: %w", peer, fabric.CtxErr(ctx))
		}
	}
}

// File ends conn's handshake and files what it brought for rank from's
// Connect: fit gets the arrival already there (ok false: none) and
// returns the one to keep, or an error to file nothing. File fails without
// calling fit when the lobby is closed.
func (lb *Lobby[C, A]) File(conn C, from int, fit func(cur A, ok bool) (A, error)) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	delete(lb.shaking, conn)
	if lb.closed {
		return fmt.Errorf("endpoint %w", errs.ErrClosed)
	}
	cur, ok := lb.arrived[from]
	a, err := fit(cur, ok)
	if err != nil {
		return err
	}
	lb.arrived[from] = a
	close(lb.changed)
	lb.changed = make(chan struct{})
	return nil
}

// Accept starts the accept loop: it takes connections from accept until
// that fails (failed is told unless the listener was closed), and runs
// handle on each in its own goroutine. handle runs the handshake and calls
// File; when it returns an error, dropped is told and the connection is
// closed.
func (lb *Lobby[C, A]) Accept(accept func() (C, error), handle func(C) error, failed func(error), dropped func(C, error)) {
	lb.handshake.Add(1)
	go func() {
		defer lb.handshake.Done()
		for {
			conn, err := accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					failed(err)
				}
				return
			}
			lb.mu.Lock()
			if lb.closed {
				lb.mu.Unlock()
				conn.Close()
				return
			}
			lb.shaking[conn] = true
			lb.handshake.Add(1)
			lb.mu.Unlock()
			go func() {
				defer lb.handshake.Done()
				err := handle(conn)
				lb.mu.Lock()
				delete(lb.shaking, conn)
				lb.mu.Unlock()
				if err != nil {
					dropped(conn, err)
					conn.Close()
				}
			}()
		}
	}()
}

// Close closes the lobby: release gets every arrival no Connect took,
// connections in their handshake are closed, then ln is closed and Close
// waits for the accept loop and the handshakes to end. It returns ln's
// error; closing again does nothing.
func (lb *Lobby[C, A]) Close(ln interface{ Close() error }, release func(A)) error {
	lb.mu.Lock()
	if lb.closed {
		lb.mu.Unlock()
		return nil
	}
	lb.closed = true
	for _, a := range lb.arrived {
		release(a)
	}
	lb.arrived = nil
	for c := range lb.shaking {
		c.Close()
	}
	close(lb.changed)
	lb.mu.Unlock()
	err := ln.Close()
	lb.handshake.Wait()
	return err
}
