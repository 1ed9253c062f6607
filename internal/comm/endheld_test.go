package comm

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestPublishedLossWaitsForAnEarlierCall: a member's published end for a
// lost member, from a collective later than the one this rank is in, is
// held back until this rank's call returns (the publisher finished this
// call: its data is on the links); one from the same collective, or of
// another kind (a mismatch), ends the communicator at once, mid-call.
func TestPublishedLossWaitsForAnEarlierCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind string
		seq  uint64 // the publisher's failed collective; this rank is in #1
		held bool
	}{
		{"loss in a later call", "peer-lost", 2, true},
		{"loss in this call", "peer-lost", 1, false},
		{"mismatch in a later call", "mismatch", 2, false},
		{"loss, no call named", "peer-lost", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, _ := fateWorld(t, 3)
			ctx := ctxT(t, 20*time.Second)
			c := comms[1]
			in, release := make(chan struct{}), make(chan struct{})
			res := make(chan error, 1)
			go func() {
				res <- c.Run(ctx, "allreduce", func(ctx context.Context) error {
					// As the engine's observer marks a collective in flight.
					c.closing.current.Store(&collectives.Call{Op: "AllReduce", Seq: 1})
					defer c.closing.current.Store(nil)
					close(in)
					select {
					case <-release:
						// The end may have come before this goroutine
						// reached the select (both ready: either is
						// picked): a link fails once it has.
						select {
						case <-c.Done():
							return c.Err()
						default:
							return nil
						}
					case <-c.Done(): // ended mid-call: the links fail the call
						return c.Err()
					}
				})
			}()
			<-in
			rec := endRecord{Kind: tc.kind, Text: "communicator w: member rank 2 was lost", Seq: tc.seq, By: 0, Members: c.members}
			b, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := comms[0].world.store.Put(ctx, endKey(c.name), b); err != nil {
				t.Fatal(err)
			}
			if tc.held {
				// The end reaches this rank and is held back (fate.hold),
				// and the communicator has not ended.
				select {
				case <-c.fate.heldC:
				case <-time.After(10 * time.Second):
					t.Fatalf("a loss published from call #%d: not held back within 10 s", tc.seq)
				}
				select {
				case <-c.Done():
					t.Fatalf("ended mid-call by a loss published from call #%d: %v", tc.seq, c.Err())
				case <-time.After(100 * time.Millisecond):
				}
			} else {
				select {
				case <-c.Done():
				case <-time.After(10 * time.Second):
					t.Fatalf("not ended 10 s after a %s end from call #%d", tc.kind, tc.seq)
				}
			}
			close(release)
			err = <-res
			if tc.held && err != nil {
				t.Fatalf("the call in flight: %v, want it to finish", err)
			}
			if !tc.held && err == nil {
				t.Fatalf("the call in flight succeeded after the communicator ended")
			}
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("not ended after the call returned")
			}
			want := errs.ErrPeerLost
			if tc.kind == "mismatch" {
				want = errs.ErrMismatch
			}
			if err := c.Err(); !errors.Is(err, want) {
				t.Errorf("communicator error %v, want one wrapping %v", err, want)
			}
		})
	}
}
