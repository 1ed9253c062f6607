package collectives_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/fake"
)

// Benchmarks run on the fake network with unlimited bandwidth, so they
// measure the algorithms' own cost (copies, reductions, scheduling) on
// this machine's cores; every rank is a goroutine, so n ranks share the
// cores. They report bus bandwidth as nccl-tests defines it (algorithm
// bandwidth × the collective's factor: 2(n-1)/n for allreduce, (n-1)/n for
// allgather, reduce-scatter and all-to-all, 1 for broadcast), comparable
// with the OpenMPI figures in DESIGN.md.
//
//	go test -run NONE -bench . -benchtime 5x ./collectives

func benchColl(b *testing.B, coll string, n, bytes int, cfg collectives.Config) {
	dt := dtype.Float32
	count := bytes / dt.Size()
	c := collCase{coll: coll, dt: dt, op: dtype.Sum, count: count}
	factor := map[string]float64{"allreduce": 2 * float64(n-1) / float64(n), "allgather": float64(n-1) / float64(n),
		"reducescatter": float64(n-1) / float64(n), "alltoall": float64(n-1) / float64(n), "broadcast": 1, "reduce": 1}[coll]
	if coll == "allgather" || coll == "reducescatter" || coll == "alltoall" {
		c.count = count / n // bytes is the size of the whole result
	}
	w := newWorld(n, fake.Options{}, cfg)
	bufs := make([][2]collectives.HostBuffer, n)
	for r := range n {
		bufs[r] = [2]collectives.HostBuffer{make([]byte, c.inLen(n, r)*4+bytes), make([]byte, c.outLen(n, r)*4+bytes)}
		fill(bufs[r][0], dt, dtype.Sum, len(bufs[r][0])/4, uint64(r))
	}
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	start := time.Now()
	results := w.run(b, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error {
		s, rv := bufs[r][0], bufs[r][1]
		for range b.N {
			var err error
			switch coll {
			case "allreduce":
				err = e.AllReduce(ctx, s, rv, c.count, dt, dtype.Sum)
			case "allgather":
				err = e.AllGather(ctx, s, rv, c.count, dt)
			case "reducescatter":
				err = e.ReduceScatter(ctx, s, rv, c.count, dt, dtype.Sum)
			case "broadcast":
				err = e.Broadcast(ctx, s, rv, c.count, dt, 0)
			case "alltoall":
				err = e.AllToAll(ctx, s, rv, c.count, dt)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	el := time.Since(start)
	for r, err := range results {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	algbw := float64(bytes) * float64(b.N) / el.Seconds()
	b.ReportMetric(algbw*factor/1e9, "busGB/s")
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "us/op")
}

func BenchmarkAllReduce64MiB(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			benchColl(b, "allreduce", n, 64<<20, collectives.DefaultConfig())
		})
	}
}

func BenchmarkAllReduceSmall(b *testing.B) {
	for _, algo := range []string{"rd", "ring"} {
		for _, size := range []int{64, 4 << 10} {
			b.Run(fmt.Sprintf("n=4/%s/%dB", algo, size), func(b *testing.B) {
				benchColl(b, "allreduce", 4, size, collectives.Config{Algo: algo})
			})
		}
	}
}

func BenchmarkAllGather64MiB(b *testing.B) {
	benchColl(b, "allgather", 4, 64<<20, collectives.DefaultConfig())
}

func BenchmarkReduceScatter64MiB(b *testing.B) {
	benchColl(b, "reducescatter", 4, 64<<20, collectives.DefaultConfig())
}

func BenchmarkBroadcast64MiB(b *testing.B) {
	benchColl(b, "broadcast", 4, 64<<20, collectives.DefaultConfig())
}

func BenchmarkAllToAll64MiB(b *testing.B) {
	benchColl(b, "alltoall", 4, 64<<20, collectives.DefaultConfig())
}
