package reduce

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexlink/flexlink/dtype"
)

// Benchmarks report bytes of dst per second (b.SetBytes(len(dst))); memory
// traffic is three times that (read dst, read src, write dst).
//
//	go test -run NONE -bench 'Reduce/float/sum' ./reduce
//
// BenchmarkReduce is the dispatching entry point (vector kernels where the
// CPU has them), BenchmarkReduceGo the portable loops, BenchmarkRef the
// scalar reference.

// Sizes resident in L1/L2, in L3, and well past the 32 MiB L3 of the
// development machine (memory-bound).
func benchSizes() []int { return []int{4 << 10, 256 << 10, 8 << 20, 128 << 20} }

func benchOps() []dtype.Op { return []dtype.Op{dtype.Sum, dtype.Prod, dtype.Min, dtype.Max} }

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func benchReduce(b *testing.B, fn func(dst, src []byte, dt dtype.DType, op dtype.Op)) {
	for _, dt := range dtype.All() {
		for _, op := range benchOps() {
			for _, size := range benchSizes() {
				b.Run(dt.String()+"/"+op.String()+"/"+sizeName(size), func(b *testing.B) {
					dst, src := benchData(dt, size, 1), benchData(dt, size, 2)
					b.SetBytes(int64(size))
					for b.Loop() {
						fn(dst, src, dt, op)
					}
				})
			}
		}
	}
}

// benchData repeats 4 KiB of random elements; float values near 1 keep
// sums and products finite and normal for a long time.
func benchData(dt dtype.DType, size int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	pattern := make([]byte, 4<<10)
	for i := range len(pattern) / dt.Size() {
		v := rng.Uint64()
		if dt.IsFloat() {
			v = encode(dt, 1+rng.Float64()/1024)
		}
		setElem(pattern, dt, i, v)
	}
	b := make([]byte, size)
	for i := 0; i < size; i += copy(b[i:], pattern) {
	}
	return b
}

func BenchmarkReduce(b *testing.B) {
	benchReduce(b, func(dst, src []byte, dt dtype.DType, op dtype.Op) {
		if err := Reduce(dst, src, dt, op); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkReduceGo(b *testing.B) { benchReduce(b, reduceGo) }

func BenchmarkRef(b *testing.B) { benchReduce(b, refLoop) }

func BenchmarkFinish(b *testing.B) {
	for _, dt := range dtype.All() {
		b.Run(dt.String()+"/avg/256KiB", func(b *testing.B) {
			buf := benchData(dt, 256<<10, 3)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := Finish(buf, dt, dtype.Avg, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
