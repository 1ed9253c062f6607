package tcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"flexlink/fabric"
	"flexlink/internal/errs"
)

// TestAbortMidTransfer: a receive in flight over several sockets ends when
// either side aborts the link, whichever socket its parts were on (a
// reader that left on the abort with an assignment still queued used to
// leave the receive waiting forever).
func TestAbortMidTransfer(t *testing.T) {
	for _, side := range []string{"receiver", "sender"} {
		t.Run(side, func(t *testing.T) {
			for i := 0; i < 40; i++ {
				a, b := newPair(t, map[string]string{"FLEXLINK_SOCKETS_PER_PEER": "2"})
				buf := make([]byte, 8<<20)
				tag := fabric.Tag{1}
				// Whole messages first, so the abort lands mid-stream.
				for k := 0; k < 3; k++ {
					a.Send(tag, buf)
				}
				rs := []interface{ Wait(context.Context) error }{b.Recv(tag, make([]byte, len(buf))), b.Recv(tag, make([]byte, len(buf))), b.Recv(tag, make([]byte, len(buf)))}
				cause := errors.New("test abort")
				if side == "receiver" {
					b.Abort(cause)
				} else {
					a.Abort(cause)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				for k, r := range rs {
					err := r.Wait(ctx)
					if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errs.ErrTimeout) {
						t.Fatalf("round %d: receive %d still pending 10 s after the abort: %v", i, k, err)
					}
					// A receive that completed before the abort is fine;
					// the others fail with the cause (this side aborted)
					// or as a lost peer (the other side did).
					if err != nil && !errors.Is(err, cause) && !errors.Is(err, errs.ErrPeerLost) {
						t.Fatalf("round %d: receive %d: %v, want the abort's cause or ErrPeerLost", i, k, err)
					}
				}
				cancel()
			}
		})
	}
}
