package gpu_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

// Bandwidth measurements on a real GPU. They check the data they move and
// log GB/s (1e9 bytes per second, per direction); they assert no speed, so
// they cannot flake on a busy machine.

const bwReps = 5

// bestOf runs op reps times (after one warm-up) between syncs and returns
// the fastest wall-clock time; sync waits for everything op enqueued.
func bestOf(t *testing.T, op func() error, sync func() error) time.Duration {
	t.Helper()
	best := time.Duration(1<<63 - 1)
	for i := 0; i <= bwReps; i++ {
		start := time.Now()
		if err := op(); err != nil {
			t.Fatal(err)
		}
		if err := sync(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); i > 0 && d < best {
			best = d
		}
	}
	return best
}

func gbps(n int, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

func gpuBandwidth(t *testing.T, r *rig) {
	t.Run("pinned", func(t *testing.T) { bwPinned(t, r) })
	t.Run("local", func(t *testing.T) { bwLocal(t, r) })
	t.Run("reduce", func(t *testing.T) { bwReduce(t, r) })
	t.Run("peer", func(t *testing.T) { bwPeer(t, r) })
	t.Run("latency", func(t *testing.T) { bwLatency(t, r) })
}

// bwPinned times device <-> pinned host copies of 256 MiB.
func bwPinned(t *testing.T, r *rig) {
	const n = 256 << 20
	dv, s := r.devs[0], r.streams[0]
	h, err := dv.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	src := pattern(n, 9)
	copy(h.Bytes(), src)
	buf := r.alloc(t, dv, n)
	up := bestOf(t, func() error { return s.CopyHtoD(buf, h.Bytes()) }, s.Synchronize)
	clear(h.Bytes())
	down := bestOf(t, func() error { return s.CopyDtoH(h.Bytes(), buf) }, s.Synchronize)
	if !bytes.Equal(h.Bytes(), src) {
		t.Fatal("pinned round trip differs")
	}
	t.Logf("pinned host -> %s, 256 MiB: %v = %.1f GB/s", dv, up, gbps(n, up))
	t.Logf("%s -> pinned host, 256 MiB: %v = %.1f GB/s", dv, down, gbps(n, down))
}

// bwLocal times a 256 MiB copy within one GPU, on the copy engines
// (cuMemcpyAsync) and as the copy kernel: the device-to-device copy
// bandwidth that ranks sharing the GPU are measured against (docs/PERF.md).
// GB/s counts the bytes copied once (as cudaMemcpy benchmarks do).
func bwLocal(t *testing.T, r *rig) {
	const n = 256 << 20
	dv, s := r.devs[0], r.streams[0]
	src, dst := r.alloc(t, dv, n), r.alloc(t, dv, n)
	want := pattern(n, 5)
	if err := s.CopyHtoD(src, want); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		op   func() error
	}{{"copy engines", func() error { return s.CopyDtoD(dst, src) }}, {"copy kernel", func() error { return s.Copy(dst, src) }}} {
		if err := s.Memset(dst, 0); err != nil {
			t.Fatal(err)
		}
		d := bestOf(t, c.op, s.Synchronize)
		got := make([]byte, n)
		if err := s.CopyDtoH(got, dst); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the copy differs", c.name)
		}
		t.Logf("%s -> %s, 256 MiB, %s: %v = %.1f GB/s", dv, dv, c.name, d, gbps(n, d))
	}
}

// bwReduce times a float32 sum of 256 MiB operands (3 × 256 MiB moved),
// locally and with one operand read from the peer.
func bwReduce(t *testing.T, r *rig) {
	const n = 256 << 20
	count := n / 4
	dv, s := r.devs[0], r.streams[0]
	a, b, dst := r.alloc(t, dv, n), r.alloc(t, dv, n), r.alloc(t, dv, n)
	av, bv := randomElems(dtype.Float32, count, 1), randomElems(dtype.Float32, count, 2)
	r.upload(t, a, av)
	r.upload(t, b, bv)
	d := bestOf(t, func() error { return s.Reduce(dst, a, b, count, dtype.Float32, dtype.Sum) }, s.Synchronize)
	if diff := diffElems(r.download(t, dst), expectReduce(t, av, bv, dtype.Float32, dtype.Sum, 1), dtype.Float32); diff != "" {
		t.Fatal(diff)
	}
	t.Logf("reduce float32 sum on %s, 3 × 256 MiB: %v = %.0f GB/s of memory traffic", dv, d, gbps(3*n, d))
	if len(r.devs) < 2 {
		return
	}
	peer := r.devs[1]
	if err := dv.EnablePeerAccess(peer); err != nil {
		t.Fatal(err)
	}
	pa := r.alloc(t, peer, n)
	r.upload(t, pa, av)
	d = bestOf(t, func() error { return s.Reduce(dst, pa, b, count, dtype.Float32, dtype.Sum) }, s.Synchronize)
	if diff := diffElems(r.download(t, dst), expectReduce(t, av, bv, dtype.Float32, dtype.Sum, 1), dtype.Float32); diff != "" {
		t.Fatal(diff)
	}
	t.Logf("reduce float32 sum on %s reading a from %s, 256 MiB each: %v = %.0f GB/s over the link", dv, peer, d, gbps(n, d))
}

// bwPeer times 1 GiB copies GPU0 -> GPU1 on the copy engines, one way and
// both ways at once.
func bwPeer(t *testing.T, r *rig) {
	r.needDevices(t, 2)
	const n = 1 << 30
	d0, d1 := r.devs[0], r.devs[1]
	for _, p := range [][2]*gpu.Device{{d0, d1}, {d1, d0}} {
		if err := p[0].EnablePeerAccess(p[1]); err != nil {
			t.Fatal(err)
		}
	}
	src0, src1 := r.alloc(t, d0, n), r.alloc(t, d1, n)
	dst0, dst1 := r.alloc(t, d0, n), r.alloc(t, d1, n)
	data := pattern(n, 5)
	r.upload(t, src0, data)
	if err := r.stream(d1).Memset(src1, 0x3c); err != nil {
		t.Fatal(err)
	}
	s0, s1 := r.stream(d0), r.stream(d1)
	both := func() error {
		if err := s0.Synchronize(); err != nil {
			return err
		}
		return s1.Synchronize()
	}
	one := bestOf(t, func() error { return s0.CopyDtoD(dst1, src0) }, s0.Synchronize)
	if !bytes.Equal(r.download(t, dst1), data) {
		t.Fatal("1 GiB peer copy gpu0 -> gpu1 differs")
	}
	two := bestOf(t, func() error {
		if err := s0.CopyDtoD(dst1, src0); err != nil {
			return err
		}
		return s1.CopyDtoD(dst0, src1)
	}, both)
	got := r.download(t, dst0)
	if bytes.Count(got, []byte{0x3c}) != n {
		t.Fatal("1 GiB peer copy gpu1 -> gpu0 differs")
	}
	t.Logf("peer copy %s -> %s, 1 GiB: %v = %.1f GB/s", d0, d1, one, gbps(n, one))
	t.Logf("peer copy both ways at once, 1 GiB each: %v = %.1f GB/s per direction", two, gbps(n, two))
}

// bwLatency measures small-operation costs: the host-side cost of enqueuing
// one operation (Go, purego, cuCtxSetCurrent and the driver), a 1 MiB
// reduction's GPU time, and a tiny reduction's round trip from enqueue to
// Synchronize returning.
func bwLatency(t *testing.T, r *rig) {
	dv, s := r.devs[0], r.streams[0]
	const mib = 1 << 20
	a, b, dst := r.alloc(t, dv, mib), r.alloc(t, dv, mib), r.alloc(t, dv, mib)
	const enqueues = 2000
	start := time.Now()
	for i := 0; i < enqueues; i++ {
		if err := s.Memset(dst.Sub(0, 4), byte(i)); err != nil {
			t.Fatal(err)
		}
	}
	perEnqueue := time.Since(start) / enqueues
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	const launches = 200
	perReduce := bestOf(t, func() error {
		for i := 0; i < launches; i++ {
			if err := s.Reduce(dst, a, b, mib/4, dtype.Float32, dtype.Sum); err != nil {
				return err
			}
		}
		return nil
	}, s.Synchronize) / launches
	roundTrip := bestOf(t, func() error { return s.Reduce(dst, a, b, 256, dtype.Float32, dtype.Sum) }, s.Synchronize)
	t.Logf("enqueue one memset: %v host time", perEnqueue)
	t.Logf("reduce float32 sum 1 MiB, %d back to back: %v each (%.0f GB/s of memory traffic)", launches, perReduce, gbps(3*mib, perReduce))
	t.Logf("reduce 1 KiB, enqueue to Synchronize returning: %v", roundTrip)
}
