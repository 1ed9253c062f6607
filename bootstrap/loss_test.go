package bootstrap

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// TestKeepOnLoss: with KeepOnLoss a lost rank fails only the collectives
// that need it (pending and later, naming it), the survivors' Put and Get
// go on, the store stays healthy, and each loss is published in order.
func TestKeepOnLoss(t *testing.T) {
	const n = 4
	tests := []struct {
		name  string
		setup func(t *testing.T) (stores []Store, lose func(r int))
	}{
		{"tcp", func(t *testing.T) ([]Store, func(int)) {
			srv, _ := testServerCfg(t, ServerConfig{Size: n, KeepOnLoss: true})
			stores := dialAll(t, srv.Addr(), n)
			return stores, func(r int) { _ = stores[r].(*endpoint).tx.(*tcpClient).pc.conn.Close() }
		}},
		{"inproc", func(t *testing.T) ([]Store, func(int)) {
			stores := NewInProcKeepOnLoss(n)
			t.Cleanup(func() {
				for _, s := range stores {
					_ = s.Close()
				}
			})
			return stores, func(r int) {
				if err := LoseInProc(stores[r]); err != nil {
					t.Error(err)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stores, lose := tc.setup(t)
			ctx := ctxFor(t, 20*time.Second)
			survivors := []Store{stores[0], stores[1], stores[3]}
			// A barrier the victim never joins is pending when it is lost.
			pending := make(chan error, len(survivors))
			for _, s := range survivors {
				go func() { pending <- s.Barrier(ctx) }()
			}
			lose(2)
			loss, err := NextLoss(ctx, stores[0], 0)
			if err != nil {
				t.Fatal(err)
			}
			if loss.Rank != 2 || !strings.Contains(loss.Text, "rank 2 on host") || !errors.Is(loss.Err(), errs.ErrPeerLost) {
				t.Errorf("loss record %+v, want rank 2 named, wrapping ErrPeerLost", loss)
			}
			for range survivors {
				if err := <-pending; !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "rank 2 on host") {
					t.Errorf("pending barrier: %v, want ErrPeerLost naming rank 2", err)
				}
			}
			if err := stores[1].Barrier(ctx); !errors.Is(err, errs.ErrPeerLost) {
				t.Errorf("later barrier: %v, want ErrPeerLost", err)
			}
			// The survivors still rendezvous through keys.
			if err := stores[3].Put(ctx, "after", []byte("x")); err != nil {
				t.Fatal(err)
			}
			if v, err := stores[0].Get(ctx, "after"); err != nil || string(v) != "x" {
				t.Fatalf("get after a loss: %q, %v", v, err)
			}
			if err := stores[1].Put(ctx, LossKey(7), []byte("x")); !errors.Is(err, errs.ErrNotSupported) {
				t.Errorf("put under the loss records' prefix: %v, want refused", err)
			}
			for _, s := range survivors {
				if err := s.Err(); err != nil {
					t.Errorf("rank %d store failed: %v", s.Rank(), err)
				}
			}
			// A second loss is the next record.
			lose(3)
			if loss, err := NextLoss(ctx, stores[1], 1); err != nil || loss.Rank != 3 {
				t.Fatalf("second loss: %+v, %v", loss, err)
			}
		})
	}
}
