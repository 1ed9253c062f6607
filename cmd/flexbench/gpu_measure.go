package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/rank"
)

// gpuColl is one implementation of device-buffer collectives that flexbench
// --device gpu measures: flexlink's DeviceComm or NCCL, on the same buffers
// and stream, with the same checks. count has NCCL's meaning for the op
// (see countFor).
type gpuColl interface {
	name() string
	run(ctx context.Context, op string, send, recv *gpu.Buffer, count int, dt dtype.DType, rop dtype.Op, root int, s *gpu.Stream) error
	close(ctx context.Context) error
}

// gpuRig is one rank's side of a GPU benchmark: the host communicator (for
// barriers and agreeing on timings), the GPU, a stream and two buffers large
// enough for the largest size, reused for every size so buffer mappings are
// made once, as in a training loop.
type gpuRig struct {
	c    *rank.Comm
	drv  *gpu.Driver
	dev  *gpu.Device
	s    *gpu.Stream
	a, b *gpu.Buffer

	planeMem int64 // device memory the flexlink communicator took at setup (bytes)
}

// countFor turns the send and recv element counts of a flexbench size into
// the count argument of the NCCL-style call.
func countFor(op string, sc, rc, n int) int {
	switch op {
	case "allgather":
		return sc
	case "reducescatter":
		return rc
	case "alltoall":
		return sc / n
	}
	return sc
}

// gpuBuffers cuts send and recv for one size out of the rig's buffers; in
// place they overlap the way NCCL defines for each collective.
func (g *gpuRig) buffers(sc, rc, me, tsz int, inPlace bool) (send, recv *gpu.Buffer) {
	if !inPlace {
		return g.a.Sub(0, sc*tsz), g.b.Sub(0, rc*tsz)
	}
	switch {
	case sc == rc:
		return g.a.Sub(0, sc*tsz), g.a.Sub(0, sc*tsz)
	case rc > sc: // allgather: send is this rank's block of recv
		return g.a.Sub(me*sc*tsz, sc*tsz), g.a.Sub(0, rc*tsz)
	default: // reducescatter: recv is this rank's block of send
		return g.a.Sub(0, sc*tsz), g.a.Sub(me*rc*tsz, rc*tsz)
	}
}

// measureGPU runs one size through coll on every rank and returns the
// agreed row (slowest rank's time, summed #wrong), like measure does for
// host buffers. Inputs are written with a host copy, results copied back
// and checked against the same float64 reference as the cpu path. Time is
// wall time from a barrier to the stream's completion of `iters` calls,
// so it includes everything a caller waits for.
func measureGPU(ctx context.Context, g *gpuRig, coll gpuColl, cfg config, size int64) (result, error) {
	n, me := g.c.Size(), g.c.Rank()
	tsz := cfg.dt.Size()
	elems := cfg.spec.round(int(size)/tsz, n)
	sc, rc := cfg.spec.counts(elems, n)
	count := countFor(cfg.spec.name, sc, rc, n)
	row := newRow(cfg, elems, elems)
	for _, inPlace := range []bool{false, true} {
		if inPlace && (!cfg.inPlaceAlso || cfg.spec.name == "alltoall" || cfg.spec.name == "sendrecv") {
			continue // NCCL defines no in-place all-to-all or send/recv
		}
		send, recv := g.buffers(sc, rc, me, tsz, inPlace)
		call := func() error {
			return coll.run(ctx, cfg.spec.name, send, recv, count, cfg.dt, cfg.op, cfg.root, g.s)
		}
		wrong := int64(0)
		if cfg.check {
			w, err := checkGPU(ctx, g, cfg, send, recv, sc, rc, call)
			if err != nil {
				return row, err
			}
			wrong = w
		}
		for i := 0; i < cfg.warm; i++ {
			if err := call(); err != nil {
				return row, err
			}
		}
		if err := g.s.Synchronize(); err != nil {
			return row, err
		}
		if err := g.c.Barrier(ctx); err != nil {
			return row, err
		}
		t0 := time.Now()
		for i := 0; i < cfg.iters; i++ {
			if err := call(); err != nil {
				return row, err
			}
		}
		if err := g.s.Synchronize(); err != nil {
			return row, err
		}
		us := float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(max(cfg.iters, 1))
		maxT, sumW := []float64{us}, []float64{float64(wrong)}
		if err := g.c.AllReduce(ctx, rank.Of(maxT), rank.Of(maxT), dtype.Max); err != nil {
			return row, err
		}
		if err := g.c.AllReduce(ctx, rank.Of(sumW), rank.Of(sumW), dtype.Sum); err != nil {
			return row, err
		}
		row.set(cfg, n, inPlace, maxT[0], int64(sumW[0]))
	}
	return row, nil
}

// checkGPU fills send (recv first poisoned, so elements nobody wrote show),
// runs call once, and counts recv elements that differ from the reference.
func checkGPU(ctx context.Context, g *gpuRig, cfg config, send, recv *gpu.Buffer, sc, rc int, call func() error) (int64, error) {
	n, me, tsz := g.c.Size(), g.c.Rank(), cfg.dt.Size()
	if err := g.s.Memset(recv, 0xA5); err != nil {
		return 0, err
	}
	host := make([]byte, max(sc, rc)*tsz)
	inParallel(sc, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dtype.Put(host, i, cfg.dt, cfg.spec.input(me, i, n, cfg.op))
		}
	})
	if err := g.s.CopyHtoD(send, host[:sc*tsz]); err != nil {
		return 0, err
	}
	if err := call(); err != nil {
		return 0, err
	}
	out := host[:rc*tsz]
	if err := g.s.CopyDtoH(out, recv); err != nil {
		return 0, err
	}
	if err := g.s.Synchronize(); err != nil {
		return 0, err
	}
	// Peers must not start the timed loop (which overwrites recv) before
	// every rank has read its result.
	if err := g.c.Barrier(ctx); err != nil {
		return 0, err
	}
	var wrong atomic.Int64
	inParallel(rc, func(lo, hi int) {
		wrong.Add(verify(rank.Bytes(out[lo*tsz:hi*tsz], cfg.dt), cfg.offset(lo), me, n, sc))
	})
	return wrong.Load(), nil
}

// inParallel runs f over [0, n) in contiguous parts on every core: filling
// and checking a GiB element by element takes seconds on one.
func inParallel(n int, f func(lo, hi int)) {
	parts := runtime.GOMAXPROCS(0)
	per := (n + parts - 1) / parts
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo int) {
			defer wg.Done()
			f(lo, min(n, lo+per))
		}(lo)
	}
	wg.Wait()
}

// offset returns cfg with the reference shifted by lo elements, so verify
// can check a part of the result that starts at element lo.
func (cfg config) offset(lo int) config {
	if lo == 0 {
		return cfg
	}
	spec := *cfg.spec
	expect := spec.expect
	spec.expect = func(me, i, n, sc int, op dtype.Op, root int) (float64, bool) {
		return expect(me, i+lo, n, sc, op, root)
	}
	cfg.spec = &spec
	return cfg
}

// flexColl is flexlink's DeviceComm.
type flexColl struct{ dc *rank.DeviceComm }

func (f flexColl) name() string                    { return "github.com/flexlink/flexlink/" + f.dc.Path() }
func (f flexColl) close(ctx context.Context) error { return f.dc.Close(ctx) }
func (f flexColl) run(ctx context.Context, op string, send, recv *gpu.Buffer, count int, dt dtype.DType, rop dtype.Op, root int, s *gpu.Stream) error {
	d := f.dc
	switch op {
	case "allreduce":
		return d.AllReduce(ctx, send, recv, count, dt, rop, s)
	case "allgather":
		return d.AllGather(ctx, send, recv, count, dt, s)
	case "reducescatter":
		return d.ReduceScatter(ctx, send, recv, count, dt, rop, s)
	case "broadcast":
		return d.Broadcast(ctx, send, recv, count, dt, root, s)
	case "reduce":
		return d.Reduce(ctx, send, recv, count, dt, rop, root, s)
	case "alltoall":
		return d.AllToAll(ctx, send, recv, count, dt, s)
	case "sendrecv":
		n, me := d.Comm().Size(), d.Comm().Rank()
		if n == 1 {
			return s.CopyDtoD(recv, send)
		}
		return d.Group(ctx, s, rank.DeviceSendTo((me+1)%n, send), rank.DeviceRecvFrom((me+n-1)%n, recv))
	}
	return fmt.Errorf("--device gpu: %s is not supported", op)
}
