package collectives_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestGroupRing has every rank send to its right and receive from its
// left in one Group, several messages per pair and several rounds: it
// deadlocks on the rendezvous fake unless all transfers are posted
// together, and any reordering shows in the data.
func TestGroupRing(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, opt := range []fake.Options{{}, {MaxSegment: 7}} {
			t.Run(fmt.Sprintf("n=%d/segment=%d", n, opt.MaxSegment), func(t *testing.T) {
				w := newWorld(n, opt, collectives.Config{})
				sizes := []int{0, 1, 1000, 70000}
				msg := func(from, to, round, i int) []byte {
					return linktest.Payload(uint64(from<<24|to<<16|round<<8|i), sizes[i])
				}
				results := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
					right, left := (r+1)%n, (r+n-1)%n
					for round := range 3 {
						var ops []collectives.P2P
						got := make([][]byte, len(sizes))
						for i := range sizes {
							got[i] = make([]byte, sizes[i])
							ops = append(ops, collectives.P2P{Send: true, Peer: right, Buf: collectives.HostBuffer(msg(r, right, round, i))},
								collectives.P2P{Peer: left, Buf: collectives.HostBuffer(got[i])})
						}
						if err := e.Group(ctx, ops); err != nil {
							return err
						}
						for i := range sizes {
							if !bytes.Equal(got[i], msg(left, r, round, i)) {
								return fmt.Errorf("round %d: message %d from rank %d corrupted", round, i, left)
							}
						}
					}
					return nil
				})
				for r, err := range results {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// TestSendRecvMismatch sends 100 bytes where the receiver expects 99:
// both ranks end with ErrMismatch naming the two ranks and the sizes.
func TestSendRecvMismatch(t *testing.T) {
	w := newWorld(2, fake.Options{}, collectives.Config{})
	results := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
		if r == 0 {
			if err := e.Send(ctx, collectives.HostBuffer(make([]byte, 100)), 1); err != nil {
				return err
			}
		} else if err := e.Recv(ctx, collectives.HostBuffer(make([]byte, 99)), 0); err != nil {
			return err
		}
		return e.Barrier(ctx)
	})
	for r, err := range results {
		if !errors.Is(err, errs.ErrMismatch) || !strings.Contains(err.Error(), "100 bytes") || !strings.Contains(err.Error(), "99 bytes") {
			t.Errorf("rank %d: %v, want ErrMismatch naming 100 and 99 bytes", r, err)
		}
	}
}
