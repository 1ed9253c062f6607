package reduce

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// finishPaths lists Finish (vector kernels for the floats where the CPU has
// them) and the scalar loop alone (the fallback).
func finishPaths() []struct {
	name string
	fn   func(dst []byte, dt dtype.DType, n int)
} {
	return []struct {
		name string
		fn   func(dst []byte, dt dtype.DType, n int)
	}{
		{"Finish", func(dst []byte, dt dtype.DType, n int) {
			if err := Finish(dst, dt, dtype.Avg, n); err != nil {
				panic(err)
			}
		}},
		{"Go", func(dst []byte, dt dtype.DType, n int) {
			if n > 1 {
				finishAvg(dst, dt, n)
			}
		}},
	}
}

func TestFinishAvgMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range dtype.All() {
		var edge []byte // every edge value, then random ones
		for i, v := range specials(dt) {
			edge = append(edge, make([]byte, dt.Size())...)
			setElem(edge, dt, i, v)
		}
		for _, n := range []int{1, 2, 3, 7, 8, 1000} {
			for _, length := range []int{0, 1, 33, 1000} {
				a := append(gen(rng, dt, length), edge...)
				for _, p := range finishPaths() {
					d := misaligned(a, 1)
					p.fn(d, dt, n)
					if err := checkAvg(dt, a, d, n); err != nil {
						t.Fatalf("%s %s avg over %d, %d elements: %v", p.name, dt, n, length, err)
					}
				}
			}
		}
	}
}

// checkAvg checks out = a / n element by element against the oracle.
func checkAvg(dt dtype.DType, a, out []byte, n int) error {
	if n == 1 { // x/1 is x: Finish leaves the buffer (NaN payloads included)
		if !bytes.Equal(out, a) {
			return fmt.Errorf("buffer changed")
		}
		return nil
	}
	for i := range len(a) / dt.Size() {
		x, got := elem(a, dt, i), elem(out, dt, i)
		if !dt.IsFloat() {
			if want := oracleAvgInt(dt, x, n); got != want {
				return fmt.Errorf("element %d: %#x / %d = %#x, want %#x", i, x, n, got, want)
			}
			continue
		}
		if err := checkFloat(dt, got, oracleAvgFloat(dt, floatValue(dt, x), n)); err != nil {
			return fmt.Errorf("element %d: %#x / %d: %w", i, x, n, err)
		}
	}
	return nil
}

func TestFinishOtherOpsLeaveData(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range dtype.All() {
		for _, op := range []dtype.Op{dtype.Sum, dtype.Prod, dtype.Min, dtype.Max} {
			a := gen(rng, dt, 100)
			d := misaligned(a, 0)
			if err := Finish(d, dt, op, 5); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(d, a) {
				t.Errorf("Finish %s %s changed the buffer", dt, op)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	reduceCall := func(dst, src []byte, dt dtype.DType, op dtype.Op) func() error {
		return func() error { return Reduce(dst, src, dt, op) }
	}
	refCall := func(dst, src []byte, dt dtype.DType, op dtype.Op) func() error {
		return func() error { return Ref(dst, src, dt, op) }
	}
	finishCall := func(dst []byte, dt dtype.DType, op dtype.Op, n int) func() error {
		return func() error { return Finish(dst, dt, op, n) }
	}
	buf := func(n int) []byte { return bytes.Repeat([]byte{7}, n) }
	for _, tc := range []struct {
		name     string
		call     func() error
		dst      []byte // must be left as it was (nil: not checked)
		mismatch bool   // the error wraps errs.ErrMismatch
	}{
		{"lengths differ", reduceCall(buf(8), buf(12), dtype.Float32, dtype.Sum), nil, true},
		{"ref lengths differ", refCall(buf(8), buf(4), dtype.Int8, dtype.Sum), nil, true},
		{"partial element", reduceCall(buf(6), buf(6), dtype.Float32, dtype.Sum), nil, false},
		{"ref partial element", refCall(buf(3), buf(3), dtype.Float16, dtype.Max), nil, false},
		{"unknown dtype", reduceCall(buf(8), buf(8), dtype.DType(200), dtype.Sum), nil, false},
		{"unknown op", reduceCall(buf(8), buf(8), dtype.Int32, dtype.Op(9)), nil, false},
		{"finish partial element", finishCall(buf(7), dtype.Int64, dtype.Avg, 2), nil, false},
		{"finish zero contributions", finishCall(buf(8), dtype.Int32, dtype.Avg, 0), nil, false},
		{"finish negative contributions", finishCall(buf(8), dtype.Float32, dtype.Avg, -2), nil, false},
		{"finish unknown op", finishCall(buf(8), dtype.Float32, dtype.Op(9), 2), nil, false},
		{"finish unknown dtype", finishCall(buf(8), dtype.DType(99), dtype.Avg, 2), nil, false},
	} {
		err := tc.call()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if errors.Is(err, errs.ErrMismatch) != tc.mismatch {
			t.Errorf("%s: %v; wraps ErrMismatch = %v, want %v", tc.name, err, !tc.mismatch, tc.mismatch)
		}
	}
	// A failed call leaves dst alone.
	d := buf(8)
	_ = Reduce(d, buf(4), dtype.Int8, dtype.Sum)
	if !bytes.Equal(d, buf(8)) {
		t.Errorf("failed Reduce wrote dst: %v", d)
	}
}

// Example shows an average over three ranks' contributions.
func Example() {
	acc := []byte{1, 2, 3, 25}
	_ = Reduce(acc, []byte{2, 2, 2, 3}, dtype.Uint8, dtype.Avg)
	_ = Reduce(acc, []byte{3, 2, 1, 4}, dtype.Uint8, dtype.Avg)
	_ = Finish(acc, dtype.Uint8, dtype.Avg, 3)
	fmt.Println(acc)
	// Output: [2 2 2 10]
}
