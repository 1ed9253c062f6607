package capi

import (
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestDevicePreMulSum: PreMulSum allreduce and reduce-scatter on device
// buffers in every floating type, with host-immediate scalars and with
// device scalars, which are read when the call runs (the test changes
// them after creating the op), against float64 (exact where every product
// and sum is exact in the type, within its tolerance for 1/3). The calls
// run in one group, on each rank's stream, and the host does not wait.
func TestDevicePreMulSum(t *testing.T) {
	f := newDevFixture(t, 2, gpufake.Config{})
	const count = 300
	n := 2
	preMulCases(t, func(t *testing.T, dt dtype.DType, residence int, kind Kind, s [2]float64) {
		sendN := count
		if kind == ReduceScatter {
			sendN = count * n
		}
		var sends, recvs []*gpu.Buffer
		var host [][]byte
		ops := make([]int32, n)
		for r := range n {
			sc := make([]byte, dt.Size())
			var err error
			if residence == ScalarHostImmediate {
				dtype.Put(sc, 0, dt, s[r])
				ops[r], err = f.l.CreatePreMulSum(f.hs[r], sc, 0, residence, preMulCodes[dt])
			} else {
				dsc := f.alloc(r, 64, false)
				dtype.Put(sc, 0, dt, 1000) // replaced before the call: the value when it runs counts
				f.upload(r, dsc, sc)
				if ops[r], err = f.l.CreatePreMulSum(f.hs[r], nil, dsc.Ptr(), residence, preMulCodes[dt]); err == nil {
					dtype.Put(sc, 0, dt, s[r])
					f.upload(r, dsc, sc)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, sendN*dt.Size())
			for i := range sendN {
				dtype.Put(b, i, dt, float64((i*(r+3))%17-8))
			}
			host = append(host, b)
			send, recv := f.alloc(r, len(b), false), f.alloc(r, count*dt.Size(), false)
			f.upload(r, send, b)
			sends, recvs = append(sends, send), append(recvs, recv)
		}
		if err := f.group(func(r int) Call {
			return Call{Kind: kind, Send: devPtr(sends[r]), Recv: devPtr(recvs[r]), Count: count, Type: preMulCodes[dt], Op: ops[r], Stream: f.ss[r].Handle()}
		}); err != nil {
			t.Fatal(err)
		}
		scale := []float64{dtype.Round(s[0], dt), dtype.Round(s[1], dt)}
		for r := range n {
			checkPreMul(t, dt, kind, s, r, count, host, scale, f.download(r, recvs[r], count*dt.Size()))
			// The send buffer is the caller's and stays as it was.
			if back := f.download(r, sends[r], len(host[r])); string(back) != string(host[r]) {
				t.Fatalf("rank %d: the send buffer changed", r)
			}
		}
	})
}

// TestDeviceNoIPC: buffers that cannot be IPC-exported (VMM memory, as
// PyTorch's expandable_segments) go through the communicator's scratch:
// allreduce in place, allgather in place, broadcast, and a grouped
// send/recv all-to-all give the right values, with and without the flag
// kernels, whichever ranks' buffers are such.
func TestDeviceNoIPC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noIPC [2]bool
		env   []string
	}{
		{"both", [2]bool{true, true}, nil},
		{"rank1", [2]bool{false, true}, nil},
		{"both/read", [2]bool{true, true}, []string{"FLEXLINK_GPU_FLAG_BYTES", "0"}},
		{"rank0/push", [2]bool{true, false}, []string{"FLEXLINK_GPU_FLAG_BYTES", "0", "FLEXLINK_GPU_ALLREDUCE", "push", "FLEXLINK_GPU_FLAG_COLL_BYTES", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDevFixture(t, 2, gpufake.Config{}, tc.env...)
			const count = 2048
			value := func(r, i int) float32 { return float32((r+1)*1000 + i%977) }
			bufs := []*gpu.Buffer{f.alloc(0, 4*2*count, tc.noIPC[0]), f.alloc(1, 4*2*count, tc.noIPC[1])}
			in := func(r int, off, n int, v func(i int) float32) {
				x := make([]float32, n)
				for i := range x {
					x[i] = v(i)
				}
				f.upload(r, bufs[r].Sub(4*off, 4*n), float32s(x))
			}
			check := func(what string, r int, n int, want func(i int) float32) {
				t.Helper()
				for i, g := range fromFloat32s(f.download(r, bufs[r], 4*n)) {
					if w := want(i); g != w {
						t.Fatalf("%s: rank %d element %d = %v, want %v", what, r, i, g, w)
					}
				}
			}
			// allreduce in place
			for r := range 2 {
				in(r, 0, count, func(i int) float32 { return value(r, i) })
			}
			if err := f.group(func(r int) Call {
				return Call{Kind: AllReduce, Send: devPtr(bufs[r]), Recv: devPtr(bufs[r]), Count: count, Type: ncclFloat32, Stream: f.ss[r].Handle()}
			}); err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				check("allreduce", r, count, func(i int) float32 { return value(0, i) + value(1, i) })
			}
			// allgather in place: rank r's block is at r*count
			for r := range 2 {
				in(r, r*count, count, func(i int) float32 { return value(r, i) + 0.5 })
			}
			if err := f.group(func(r int) Call {
				return Call{Kind: AllGather, Send: devPtr(bufs[r].Sub(4*r*count, 4*count)), Recv: devPtr(bufs[r]), Count: count, Type: ncclFloat32, Stream: f.ss[r].Handle()}
			}); err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				check("allgather", r, 2*count, func(i int) float32 { return value(i/count, i%count) + 0.5 })
			}
			// broadcast from rank 1, in place
			in(1, 0, count, func(i int) float32 { return float32(-i) })
			if err := f.group(func(r int) Call {
				return Call{Kind: Broadcast, Send: devPtr(bufs[r]), Recv: devPtr(bufs[r]), Count: count, Type: ncclFloat32, Root: 1, Stream: f.ss[r].Handle()}
			}); err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				check("broadcast", r, count, func(i int) float32 { return float32(-i) })
			}
			// grouped send/recv all-to-all: send block j from [0,count), receive into [count,2count)
			recv := []*gpu.Buffer{f.alloc(0, 4*2*count, tc.noIPC[0]), f.alloc(1, 4*2*count, tc.noIPC[1])}
			for r := range 2 {
				in(r, 0, 2*count, func(i int) float32 { return value(r, i) })
			}
			half := uint64(count)
			f.l.GroupStart(fixtureTid)
			for r := range 2 {
				for p := range 2 {
					if err := f.l.Coll(fixtureTid, f.hs[r], Call{Kind: Send, Send: devPtr(bufs[r].Sub(4*p*count, 4*count)), Count: half, Type: ncclFloat32, Root: p, Stream: f.ss[r].Handle()}); err != nil {
						t.Fatal(err)
					}
					if err := f.l.Coll(fixtureTid, f.hs[r], Call{Kind: Recv, Recv: devPtr(recv[r].Sub(4*p*count, 4*count)), Count: half, Type: ncclFloat32, Root: p, Stream: f.ss[r].Handle()}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := f.l.GroupEnd(fixtureTid); err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				for i, g := range fromFloat32s(f.download(r, recv[r], 4*2*count)) {
					if w := value(i/count, r*count+i%count); g != w {
						t.Fatalf("send/recv: rank %d element %d = %v, want %v", r, i, g, w)
					}
				}
			}
		})
	}
}
