package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// payload is rank r's contribution in round k: its length varies with the
// rank (rank 0 contributes nothing in even rounds) so that parts cannot be
// confused.
func payload(r, k int) []byte {
	if r == 0 && k%2 == 0 {
		return nil
	}
	return bytes.Repeat([]byte(fmt.Sprintf("<r%d k%d>", r, k)), r%4+1)
}

func TestStoreOps(t *testing.T) {
	for _, impl := range impls {
		for _, n := range []int{1, 2, 5, 16} {
			t.Run(fmt.Sprintf("%s/n=%d", impl.name, n), func(t *testing.T) {
				stores := impl.make(t, n)
				ctx := ctxFor(t, 20*time.Second)
				const rounds = 3
				var arrived atomic.Int64
				errs := onAll(stores, func(s Store) error {
					r := s.Rank()
					if s.Size() != n {
						return fmt.Errorf("rank %d: size %d", r, s.Size())
					}
					for k := range rounds {
						got, err := s.AllGather(ctx, payload(r, k))
						if err != nil {
							return err
						}
						if len(got) != n {
							return fmt.Errorf("rank %d round %d: %d parts", r, k, len(got))
						}
						for i, p := range got {
							if !bytes.Equal(p, payload(i, k)) {
								return fmt.Errorf("rank %d round %d: part %d = %q, want %q", r, k, i, p, payload(i, k))
							}
						}
						root := k % n
						b, err := s.Broadcast(ctx, root, payload(r, k+10))
						if err != nil {
							return err
						}
						if !bytes.Equal(b, payload(root, k+10)) {
							return fmt.Errorf("rank %d round %d: broadcast from %d = %q, want %q", r, k, root, b, payload(root, k+10))
						}
						arrived.Add(1)
						if err := s.Barrier(ctx); err != nil {
							return err
						}
						if a := arrived.Load(); a < int64(n*(k+1)) {
							return fmt.Errorf("rank %d round %d: left the barrier when only %d of %d arrivals happened", r, k, a, n*(k+1))
						}
					}
					// Key/value: some Gets come before the matching Put.
					for i := range n {
						peer := (r + i) % n
						if i == 0 {
							if err := s.Put(ctx, fmt.Sprintf("addr/%d", r), payload(r, 99)); err != nil {
								return err
							}
							continue
						}
						v, err := s.Get(ctx, fmt.Sprintf("addr/%d", peer))
						if err != nil {
							return err
						}
						if !bytes.Equal(v, payload(peer, 99)) {
							return fmt.Errorf("rank %d: get addr/%d = %q, want %q", r, peer, v, payload(peer, 99))
						}
					}
					return nil
				})
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range stores {
					if s.Err() != nil {
						t.Fatalf("rank %d: Err() = %v after success", s.Rank(), s.Err())
					}
				}
			})
		}
	}
}

func TestPutWriteOnce(t *testing.T) {
	forEachImpl(t, 2, 10*time.Second, func(t *testing.T, stores []Store, ctx context.Context) {
		tests := []struct {
			name    string
			rank    int
			value   string
			wantErr error
		}{
			{"first", 0, "v1", nil},
			{"same bytes again", 1, "v1", nil},
			{"different bytes", 1, "v2", errs.ErrMismatch},
			{"different bytes, same rank", 0, "", errs.ErrMismatch},
		}
		for _, tc := range tests {
			err := stores[tc.rank].Put(ctx, "k", []byte(tc.value))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("%s: Put = %v, want %v", tc.name, err, tc.wantErr)
			}
		}
		for _, s := range stores {
			v, err := s.Get(ctx, "k")
			if err != nil || string(v) != "v1" {
				t.Fatalf("rank %d: Get = %q, %v; want v1", s.Rank(), v, err)
			}
			if s.Err() != nil {
				t.Fatalf("a refused Put must not fail the store: %v", s.Err())
			}
		}
	})
}

// TestResultsOwned checks that returned slices belong to the caller and
// that a caller may reuse its input: rank 0 scribbles over both, and the
// other ranks' results must not change.
func TestResultsOwned(t *testing.T) {
	forEachImpl(t, 3, 10*time.Second, func(t *testing.T, stores []Store, ctx context.Context) {
		errs := onAll(stores, func(s Store) error {
			in := payload(s.Rank(), 1)
			got, err := s.AllGather(ctx, in)
			if err != nil {
				return err
			}
			if s.Rank() == 0 {
				for _, p := range got {
					for i := range p {
						p[i] = 'X'
					}
				}
				for i := range in {
					in[i] = 'Y'
				}
			}
			if err := s.Barrier(ctx); err != nil {
				return err
			}
			if s.Rank() == 0 {
				return nil
			}
			for i, p := range got {
				if !bytes.Equal(p, payload(i, 1)) {
					return fmt.Errorf("rank %d: part %d changed to %q", s.Rank(), i, p)
				}
			}
			return nil
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}
