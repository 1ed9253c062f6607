package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

// config is one flexbench run.
type config struct {
	spec *opSpec
	sweep
	dt          dtype.DType
	op          dtype.Op
	root        int
	check       bool
	inPlaceAlso bool
	timing
}

// sweep is the message sizes swept: minB to maxB, times factor (or plus
// step) each row.
type sweep struct {
	minB, maxB int64
	factor     float64
	step       int64
}

// timing is how each size is measured and how long it may take.
type timing struct {
	iters, warm  int
	iterDeadline time.Duration
	avg          int           // time across ranks (-a): avgRank0, avgMean, avgMin or avgMax
	agg          int           // operations per timed iteration (-m); 0 is 1
	timeout      time.Duration // the whole run (-T); 0: none
}

// result is one row: a size, measured out of place and in place. Its JSON
// form is flat (the embedded structs' fields are promoted), one object per
// row with the keys in the order below: TestResultJSON pins it.
type result struct {
	shape
	outOfPlace
	inPlace
}

// shape says what a row measured.
type shape struct {
	Bytes int64  `json:"size"`
	Count int    `json:"count"`
	Type  string `json:"type"`
	Op    string `json:"redop"`
	Root  int    `json:"root"`
}

// outOfPlace is a row's out-of-place measurement.
type outOfPlace struct {
	OutTime float64 `json:"out_time_us"`
	OutAlg  float64 `json:"out_algbw_gbs"`
	OutBus  float64 `json:"out_busbw_gbs"`
	OutErr  int64   `json:"out_wrong"`
}

// inPlace is a row's in-place measurement.
type inPlace struct {
	InTime float64 `json:"in_time_us"`
	InAlg  float64 `json:"in_algbw_gbs"`
	InBus  float64 `json:"in_busbw_gbs"`
	InErr  int64   `json:"in_wrong"`
}

func sizes(c config) []int64 {
	var out []int64
	for s := c.minB; s <= c.maxB; {
		out = append(out, s)
		next := s + c.step
		if c.factor > 1 {
			next = int64(float64(s) * c.factor)
		}
		if next <= s {
			break
		}
		s = next
	}
	return out
}

// newRow is the row of one size of cfg's collective, of elems elements,
// with count in the count column; its timings and #wrong are to come.
func newRow(cfg config, elems, count int) result {
	row := result{shape: shape{Bytes: int64(elems * cfg.dt.Size()), Count: count, Type: cfg.dt.String(), Op: "none", Root: -1}}
	if cfg.spec.reduces {
		row.Op = cfg.op.String()
	}
	if cfg.spec.rooted {
		row.Root = cfg.root
	}
	return row
}

// measure runs one size on every rank and returns the row (every rank gets
// the same, agreed row: time is the slowest rank's, #wrong the sum).
func measure(ctx context.Context, c backend, cfg config, size int64) (result, error) {
	n, me := c.size(), c.rank()
	tsz := cfg.dt.Size()
	elems := cfg.spec.round(int(size)/tsz, n)
	sc, rc := cfg.spec.counts(elems, n)
	// The count column is what nccl-tests prints: the elements of one
	// rank's block for allgather, reducescatter and alltoall.
	count := elems
	switch cfg.spec.name {
	case "allgather", "reducescatter", "alltoall":
		count = elems / n
	}
	row := newRow(cfg, elems, count)
	for _, inPlace := range []bool{false, true} {
		if inPlace && !cfg.inPlaceAlso {
			continue
		}
		send, recv := buffers(cfg, sc, rc, me, n, inPlace)
		wrong := int64(0)
		if cfg.check {
			fill(send, cfg, me, n)
			if err := c.run(ctx, cfg.spec, send, recv, cfg.op, cfg.root); err != nil {
				return row, err
			}
			wrong = verify(recv, cfg, me, n, sc)
		}
		for i := 0; i < cfg.warm; i++ {
			if err := c.run(ctx, cfg.spec, send, recv, cfg.op, cfg.root); err != nil {
				return row, err
			}
		}
		if err := c.barrier(ctx); err != nil {
			return row, err
		}
		ops := max(cfg.iters, 1) * max(cfg.agg, 1)
		t0 := time.Now()
		for i := 0; i < cfg.iters*max(cfg.agg, 1); i++ {
			if err := c.run(ctx, cfg.spec, send, recv, cfg.op, cfg.root); err != nil {
				return row, err
			}
		}
		us, err := agreedTime(ctx, c, float64(time.Since(t0).Nanoseconds())/1e3/float64(ops), cfg.avg)
		if err != nil {
			return row, err
		}
		w, err := c.reduceF64(ctx, float64(wrong), dtype.Sum)
		if err != nil {
			return row, err
		}
		row.set(cfg, n, inPlace, us, int64(w))
	}
	return row, nil
}

// set fills the out-of-place or in-place columns from the agreed time per
// call (µs) and #wrong, with the bandwidths over n ranks.
func (row *result) set(cfg config, n int, inPlace bool, us float64, wrong int64) {
	alg := 0.0
	if us > 0 {
		alg = float64(row.Bytes) / us / 1e3 // bytes/µs → GB/s
	}
	bus := alg * cfg.spec.bus(n)
	if inPlace {
		row.InTime, row.InAlg, row.InBus, row.InErr = us, alg, bus, wrong
	} else {
		row.OutTime, row.OutAlg, row.OutBus, row.OutErr = us, alg, bus, wrong
	}
}

// buffers allocates send and recv for one size; in place they overlap the
// way NCCL defines for each collective.
func buffers(cfg config, sc, rc, me, n int, inPlace bool) (rank.Data, rank.Data) {
	tsz := cfg.dt.Size()
	if !inPlace {
		return rank.Bytes(make([]byte, sc*tsz), cfg.dt), rank.Bytes(make([]byte, rc*tsz), cfg.dt)
	}
	switch {
	case sc == rc:
		d := rank.Bytes(make([]byte, sc*tsz), cfg.dt)
		return d, d
	case rc > sc: // allgather: send is this rank's block of recv
		recv := rank.Bytes(make([]byte, rc*tsz), cfg.dt)
		b := recv.Buf.(collectives.HostBuffer).Bytes()
		return rank.Bytes(b[me*sc*tsz:(me+1)*sc*tsz], cfg.dt), recv
	default: // reducescatter: recv is this rank's block of send
		send := rank.Bytes(make([]byte, sc*tsz), cfg.dt)
		b := send.Buf.(collectives.HostBuffer).Bytes()
		return send, rank.Bytes(b[me*rc*tsz:(me+1)*rc*tsz], cfg.dt)
	}
}

func fill(d rank.Data, cfg config, me, n int) {
	b := d.Buf.(collectives.HostBuffer).Bytes()
	for i := 0; i < d.Count; i++ {
		dtype.Put(b, i, cfg.dt, cfg.spec.input(me, i, n, cfg.op))
	}
}

// verify counts the elements of recv that differ from the float64 reference
// by more than the dtype's tolerance.
func verify(d rank.Data, cfg config, me, n, sc int) int64 {
	b := d.Buf.(collectives.HostBuffer).Bytes()
	tol := dtype.Tolerance(cfg.dt)
	var wrong int64
	for i := 0; i < d.Count; i++ {
		want, ok := cfg.spec.expect(me, i, n, sc, cfg.op, cfg.root)
		if !ok {
			continue
		}
		if cfg.op == dtype.Avg && !cfg.dt.IsFloat() {
			want = math.Trunc(want)
		}
		want = dtype.Round(want, cfg.dt)
		got := dtype.Get(b, i, cfg.dt)
		if math.Abs(got-want) > tol*math.Max(1, math.Abs(want)) || math.IsNaN(got) {
			wrong++
		}
	}
	return wrong
}

func (r result) String() string {
	return fmt.Sprintf("%12d  %12d  %8s  %6s  %6d  %9.1f  %7.2f  %7.2f  %6d  %9.1f  %7.2f  %7.2f  %6d",
		r.Bytes, r.Count, r.Type, r.Op, r.Root, r.OutTime, r.OutAlg, r.OutBus, r.OutErr, r.InTime, r.InAlg, r.InBus, r.InErr)
}
