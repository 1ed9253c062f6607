package comm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/errs"
)

// serverLostErr is a store's error when its server was lost.
var serverLostErr = fmt.Errorf("bootstrap: rank 1: bootstrap server at test lost: connection closed: %w (%w)", errs.ErrPeerLost, bootstrap.ErrServerLost)

// TestServerLostMidCall: when the bootstrap server is lost (flexlink's
// libnccl serves it from rank 0's process, which may end right after its
// last collective), a call in flight finishes with the data already on
// its links, and the communicator ends after it; a call that cannot
// finish is ended by the grace; an idle communicator ends at once.
func TestServerLostMidCall(t *testing.T) {
	comms, _ := fateWorld(t, 2)
	ctx := ctxT(t, 20*time.Second)
	// Rank 1 is in a call when the server goes; the data it takes after
	// that is on its way from rank 0.
	sent := []int64{42}
	sendRes := make(chan error, 1)
	go func() {
		sendRes <- comms[0].Run(ctx, "send", func(ctx context.Context) error {
			return comms[0].engine.Send(ctx, int64Bytes(sent), 1)
		})
	}()
	in, lost := make(chan struct{}), make(chan struct{})
	got := []int64{0}
	res := make(chan error, 1)
	go func() {
		res <- comms[1].Run(ctx, "recv", func(ctx context.Context) error {
			close(in)
			<-lost
			return comms[1].engine.Recv(ctx, int64Bytes(got), 0)
		})
	}()
	<-in
	ended := make(chan struct{})
	go func() { comms[1].endAfterCall(serverLostErr, time.Hour); close(ended) }()
	close(lost)
	if err := <-res; err != nil || got[0] != 42 {
		t.Fatalf("the receive in flight when the server was lost: %v, %d; want 42", err, got[0])
	}
	if err := <-sendRes; err != nil {
		t.Fatalf("rank 0's send: %v", err)
	}
	<-ended
	if err := comms[1].Err(); !errors.Is(err, bootstrap.ErrServerLost) {
		t.Fatalf("after the call: communicator error %v, want the server's loss", err)
	}

	// A call that cannot finish (its peer never sends) ends with the
	// grace, naming the loss.
	comms, _ = fateWorld(t, 2)
	in = make(chan struct{})
	go func() {
		res <- comms[1].Run(ctx, "recv", func(ctx context.Context) error {
			close(in)
			return comms[1].engine.Recv(ctx, int64Bytes(got), 0)
		})
	}()
	<-in
	start := time.Now()
	comms[1].endAfterCall(serverLostErr, 100*time.Millisecond)
	if err := <-res; !errors.Is(err, bootstrap.ErrServerLost) {
		t.Fatalf("a stuck call: %v, want the server's loss", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the stuck call ended %v after the loss, want about the grace", el)
	}
	// A call that fails while an end is held back ends with that end, at
	// once: it is the root cause (the link's words come second).
	comms, _ = fateWorld(t, 2)
	if err, _ := failWhileHeld(ctx, comms[1], fmt.Errorf("recv from rank 0: link closed: %w", errs.ErrPeerLost)); !errors.Is(err, bootstrap.ErrServerLost) || !strings.Contains(err.Error(), "link closed") {
		t.Fatalf("a call that failed with an end held back: %v, want the held end first and the link's words", err)
	}
	// A call that failed on its link before the loss came (the link's EOF
	// often beats the bootstrap's news by milliseconds): the loss, held
	// back while the rank waits for the root cause, is still its cause.
	comms, _ = fateWorld(t, 2)
	returning := make(chan struct{})
	go func() {
		res <- comms[1].Run(ctx, "recv", func(context.Context) error {
			close(returning)
			return fmt.Errorf("recv from rank 0: link closed: %w", errs.ErrPeerLost)
		})
	}()
	<-returning
	comms[1].endAfterCall(serverLostErr, time.Hour) // returns once the call has
	if err := <-res; !errors.Is(err, bootstrap.ErrServerLost) || !strings.Contains(err.Error(), "link closed") {
		t.Fatalf("a call that failed before the loss came: %v, want the loss first and the link's words", err)
	}
	// A call that finds a mismatch while an end is held back reports the
	// mismatch: its own finding, not a consequence of the loss.
	comms, _ = fateWorld(t, 2)
	err, after := failWhileHeld(ctx, comms[1], fmt.Errorf("rank 0 called AllGather #3 where this rank called AllReduce #3: %w", errs.ErrMismatch))
	if !errors.Is(err, errs.ErrMismatch) || errors.Is(err, bootstrap.ErrServerLost) {
		t.Fatalf("a mismatch found with an end held back: %v, want the mismatch as the cause", err)
	}
	if !errors.Is(after, errs.ErrMismatch) {
		t.Errorf("after a mismatch: communicator error %v, want the mismatch", after)
	}
	// Idle: at once, whatever the grace.
	comms, _ = fateWorld(t, 2)
	comms[0].endAfterCall(serverLostErr, time.Hour)
	if err := comms[0].Err(); !errors.Is(err, bootstrap.ErrServerLost) {
		t.Fatalf("an idle communicator: %v, want ended by the server's loss", err)
	}
}

// failWhileHeld makes c's call fail with callErr while the server's loss
// is held back for it (endAfterCall), and returns the call's error and,
// once the held end has run, the communicator's.
func failWhileHeld(ctx context.Context, c *Comm, callErr error) (err, after error) {
	in, fail, res := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		res <- c.Run(ctx, "call", func(context.Context) error {
			close(in)
			<-fail
			return callErr
		})
	}()
	<-in
	ended := make(chan struct{})
	go func() { c.endAfterCall(serverLostErr, time.Hour); close(ended) }()
	for c.fate.held() == nil {
		runtime.Gosched() // until the end is held back (it is the scenario, not a timing)
	}
	close(fail)
	err = <-res
	<-ended
	return err, c.Err()
}
