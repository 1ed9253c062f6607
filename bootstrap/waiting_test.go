package bootstrap

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// TestTimeoutNamesWhom: a collective that times out says which ranks have
// not joined the job and which have not called it; a rank may not put a
// key under the answers' prefix.
func TestTimeoutNamesWhom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		joined []int // ranks that join a job of 4
		call   []int // ranks that call the barrier
		want   string
	}{
		{"never joined", []int{0, 1, 2}, []int{0, 1, 2}, "(rank 3 has not joined the job)"},
		{"not called", []int{0, 1, 2, 3}, []int{0, 2}, "(ranks 1, 3 have not called barrier #0)"},
		{"both", []int{0, 1, 3}, []int{0, 1}, "(rank 2 has not joined the job; rank 3 has not called barrier #0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := testServer(t, 4, 0)
			st := dialRanks(t, srv.Addr(), 4, tc.joined...)
			byRank := map[int]Store{}
			for _, s := range st {
				byRank[s.Rank()] = s
			}
			errc := make(chan error, len(tc.call))
			var wg sync.WaitGroup
			for _, r := range tc.call {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
					defer cancel()
					errc <- byRank[r].Barrier(ctx)
				})
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				if !errors.Is(err, errs.ErrTimeout) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("barrier error %v, want a timeout saying %q", err, tc.want)
				}
			}
		})
	}
	srv, _ := testServer(t, 1, 0)
	s := dialRanks(t, srv.Addr(), 1, 0)[0]
	if err := s.Put(ctxFor(t, 5*time.Second), waitingKey(0), []byte("x")); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("put under the waiting prefix: %v, want ErrNotSupported", err)
	}
}
