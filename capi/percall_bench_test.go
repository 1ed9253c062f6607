package capi

import (
	"fmt"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// The host cost of one C call (issue 29, the small-message fast path) on
// the fake driver, as nccl-tests' all_reduce_perf makes it: out of place,
// float32, on device buffers and the caller's stream, with an idMem as the
// library's Memory (an Identifier, as cmd/libnccl's cudaMemory). A CPU
// figure: the fake driver's copies and flag kernels run on the host, so
// the larger sizes include the fake device's work too. docs/PERF.md,
// "C library per-call host cost (fake driver)":
//
//	go test ./capi -run '^$' -bench PerCall -benchmem -benchtime=2000x -count=3

// perCallSizes are the message sizes measured: the smallest and the
// largest of nccl-tests' small-message range.
var perCallSizes = []int{8, 64 << 10}

// BenchmarkPerCall1 is ncclAllReduce on one rank (the collective is a
// device copy, collectives/direct selfCopy): the library's own path.
// "inplace" passes one buffer as both (PyTorch's all_reduce): nothing is
// copied.
func BenchmarkPerCall1(b *testing.B) {
	for _, n := range perCallSizes {
		for _, inPlace := range []bool{false, true} {
			name := sizeName(n)
			if inPlace {
				name += "-inplace"
			}
			b.Run(name, func(b *testing.B) { benchPerCall1(b, n, inPlace) })
		}
	}
}

func benchPerCall1(b *testing.B, n int, inPlace bool) {
	mem := &idMem{fakeMem: &fakeMem{alloc: map[uintptr]Region{}}}
	l, h, _, dv := oneDeviceRank(b, mem)
	send, recv := memAlloc(b, dv, mem, n, 0), memAlloc(b, dv, mem, n, 0)
	if inPlace {
		recv = send
	}
	s := newStream(b, dv)
	call := Call{Kind: AllReduce, Send: devPtr(send), Recv: devPtr(recv), Count: uint64(n / 4), Type: ncclFloat32, Stream: s.Handle()}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Coll(1, h, call); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPerCallGroup1 is ncclGroupStart, ncclAllReduce, ncclGroupEnd
// on one rank.
func BenchmarkPerCallGroup1(b *testing.B) {
	mem := &idMem{fakeMem: &fakeMem{alloc: map[uintptr]Region{}}}
	l, h, _, dv := oneDeviceRank(b, mem)
	send, recv := memAlloc(b, dv, mem, 8, 0), memAlloc(b, dv, mem, 8, 0)
	s := newStream(b, dv)
	call := Call{Kind: AllReduce, Send: devPtr(send), Recv: devPtr(recv), Count: 2, Type: ncclFloat32, Stream: s.Handle()}
	b.ReportAllocs()
	for b.Loop() {
		l.GroupStart(1)
		if err := l.Coll(1, h, call); err != nil {
			b.Fatal(err)
		}
		if err := l.GroupEnd(1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPerCall2 is ncclAllReduce of 8 bytes on two ranks on two fake
// GPUs (the flag kernels take it), each rank's calls from a thread of its
// own as two processes make them: per op, one call of each rank, the fake
// kernels' meeting included. "group" makes both ranks' calls from one
// thread inside a group (nccl-tests -g 2).
func BenchmarkPerCall2(b *testing.B) {
	f, mem := newIDFixture(b, 2, gpufake.Config{})
	var calls [2]Call
	for r := range calls {
		send, recv := memAlloc(b, f.dvs[r], mem, 8, r), memAlloc(b, f.dvs[r], mem, 8, r)
		calls[r] = Call{Kind: AllReduce, Send: devPtr(send), Recv: devPtr(recv), Count: 2, Type: ncclFloat32, Stream: f.ss[r].Handle()}
	}
	b.Run("threads", func(b *testing.B) {
		benchThreads(b, len(calls), func(r int) error { return f.l.Coll(10+r, f.hs[r], calls[r]) })
	})
	b.Run("group", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := f.group(func(r int) Call { return calls[r] }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// benchThreads runs op(r) b.N times on a goroutine per rank r of n (each
// rank's calls from a thread of its own, as n processes make them) and
// fails b with the first rank's error.
func benchThreads(b *testing.B, n int, op func(r int) error) {
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if err := op(r); err != nil {
					errs[r] = fmt.Errorf("rank %d: %w", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
