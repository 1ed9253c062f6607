package reduce

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestPreMulMatchesOracle: every dtype, edge and random values and scalars,
// odd lengths and offsets, in place and not, against the oracle's product
// (PreMul is x × s as NCCL's PreMulSum computes it, which is the oracle's
// Prod for every type).
func TestPreMulMatchesOracle(t *testing.T) {
	for _, dt := range dtype.All() {
		t.Run(dt.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(dt), 99))
			scalars := specials(dt)
			for range 8 {
				scalars = append(scalars, elem(gen(rng, dt, 1), dt, 0))
			}
			for _, sv := range scalars {
				scalar := make([]byte, dt.Size())
				setElem(scalar, dt, 0, sv)
				for _, n := range []int{0, 1, 7, 33, 1000} {
					src := gen(rng, dt, n)
					for i, v := range specials(dt) { // every edge value against every scalar
						if i < n {
							setElem(src, dt, i, v)
						}
					}
					for _, inPlace := range []bool{false, true} {
						in := misaligned(src, 1)
						dst := misaligned(make([]byte, len(src)), 3)
						if inPlace {
							dst = in
						}
						if err := PreMul(dst, in, dt, scalar); err != nil {
							t.Fatal(err)
						}
						if !inPlace && !bytes.Equal(in, src) {
							t.Fatalf("scalar %#x n=%d: src was modified", sv, n)
						}
						s := make([]byte, len(src))
						for i := range n {
							setElem(s, dt, i, sv)
						}
						if err := checkOracle(dt, dtype.Prod, src, s, dst); err != nil {
							t.Fatalf("scalar %#x n=%d in place %v: %v", sv, n, inPlace, err)
						}
					}
				}
			}
		})
	}
}

func TestPreMulErrors(t *testing.T) {
	b4, b8 := make([]byte, 4), make([]byte, 8)
	for _, tc := range []struct {
		name      string
		dst, src  []byte
		dt        dtype.DType
		scalar    []byte
		mismatch  bool
		unchanged bool
	}{
		{"unknown dtype", b4, b4, dtype.DType(200), b4, false, true},
		{"scalar too short", b8, b8, dtype.Float64, b4, false, true},
		{"scalar too long", b4, b4, dtype.Float16, b4, false, true},
		{"lengths differ", b4, b8, dtype.Float32, b4, true, true},
		{"not whole elements", make([]byte, 6), make([]byte, 6), dtype.Float32, b4, false, true},
	} {
		before := append([]byte(nil), tc.dst...)
		err := PreMul(tc.dst, tc.src, tc.dt, tc.scalar)
		if err == nil || errors.Is(err, errs.ErrMismatch) != tc.mismatch {
			t.Errorf("%s: err %v, want an error (mismatch %v)", tc.name, err, tc.mismatch)
		}
		if !bytes.Equal(before, tc.dst) {
			t.Errorf("%s: dst changed", tc.name)
		}
	}
}
