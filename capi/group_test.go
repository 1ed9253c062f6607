package capi

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/settings"
)

// hostLib is n host-buffer ranks of one Library (no CUDA), made by
// ncclCommInitAll; calls for all of them come from one thread in groups.
func hostLib(t *testing.T, n int) (*Library, []uintptr) {
	t.Helper()
	l := New(Options{Env: settings.Map(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_TIMEOUT": "60s"})})
	hs, err := l.InitAll(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done := make(chan struct{}, len(hs))
		for _, h := range hs {
			go func() { _ = l.Destroy(h); done <- struct{}{} }()
		}
		for range hs {
			<-done
		}
	})
	return l, hs
}

// hostGroup makes call(r) for every rank inside one group on thread tid
// and returns the errors of the calls and of the group end.
func hostGroup(l *Library, tid int, hs []uintptr, call func(r int) Call) (calls []error, end error) {
	l.GroupStart(tid)
	for r := range hs {
		calls = append(calls, l.Coll(tid, hs[r], call(r)))
	}
	return calls, l.GroupEnd(tid)
}

func f64s(n int, f func(i int) float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = f(i)
	}
	return v
}

func ptr(v []float64) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(v)) }

// checkSum runs a group allreduce of every rank's in[r] and checks every
// rank's result against the float64 sum.
func checkSum(t *testing.T, l *Library, tid int, hs []uintptr, in [][]float64) {
	t.Helper()
	out := make([][]float64, len(hs))
	for r := range out {
		out[r] = make([]float64, len(in[r]))
	}
	calls, end := hostGroup(l, tid, hs, func(r int) Call {
		return Call{Kind: AllReduce, Send: ptr(in[r]), Recv: ptr(out[r]), Count: uint64(len(in[r])), Type: ncclFloat64}
	})
	for r, err := range calls {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if end != nil {
		t.Fatal(end)
	}
	for r := range out {
		for i, got := range out[r] {
			want := 0.0
			for q := range in {
				want += in[q][i]
			}
			if got != want {
				t.Fatalf("rank %d element %d = %v, want %v", r, i, got, want)
			}
		}
	}
}

// TestGroupRefusedCloses: a call refused inside a group fails, the group
// end fails naming it and runs none of the group's calls (the valid call
// of the other rank did not run half a collective), the thread is out of
// the group, and the communicators work after it.
func TestGroupRefusedCloses(t *testing.T) {
	l, hs := hostLib(t, 2)
	const tid = 11
	in := [][]float64{f64s(64, func(i int) float64 { return float64(i) }), f64s(64, func(i int) float64 { return float64(2 * i) })}
	out := make([]float64, 64)
	calls, end := hostGroup(l, tid, hs, func(r int) Call {
		c := Call{Kind: AllReduce, Send: ptr(in[r]), Recv: ptr(out), Count: 64, Type: ncclFloat64}
		if r == 1 {
			c.Type = 99 // no such datatype
		}
		return c
	})
	if calls[0] != nil || calls[1] == nil {
		t.Fatalf("calls: %v", calls)
	}
	if end == nil || ResultOf(end) != InvalidArgument {
		t.Fatalf("group end: %v (%v), want the refusal", end, ResultOf(end))
	}
	if l.groups.in(tid) {
		t.Fatal("the thread is still inside the group")
	}
	for i, v := range out {
		if v != 0 {
			t.Fatalf("rank 0's call ran: element %d = %v", i, v)
		}
	}
	checkSum(t, l, tid, hs, in)
}

// TestGroupSimulateEnd: ncclGroupSimulateEnd closes the group, runs none
// of its calls and estimates more time for more bytes; an inner one only
// leaves the inner group; a collective after it is right.
func TestGroupSimulateEnd(t *testing.T) {
	l, hs := hostLib(t, 2)
	const tid = 12
	simulate := func(count int) float64 {
		t.Helper()
		in := [][]float64{f64s(count, func(i int) float64 { return 1 }), f64s(count, func(i int) float64 { return 2 })}
		out := [][]float64{make([]float64, count), make([]float64, count)}
		l.GroupStart(tid)
		for r := range hs {
			if err := l.Coll(tid, hs[r], Call{Kind: AllReduce, Send: ptr(in[r]), Recv: ptr(out[r]), Count: uint64(count), Type: ncclFloat64}); err != nil {
				t.Fatal(err)
			}
		}
		est, err := l.GroupSimulateEnd(tid)
		if err != nil {
			t.Fatal(err)
		}
		if l.groups.in(tid) {
			t.Fatal("the thread is still inside the group")
		}
		for r := range out {
			for i, v := range out[r] {
				if v != 0 {
					t.Fatalf("rank %d: the simulated call ran (element %d = %v)", r, i, v)
				}
			}
		}
		return est.Seconds()
	}
	small, large := simulate(16), simulate(1<<16)
	if !(small > 0 && large > small) {
		t.Fatalf("estimates: %v s for 16 doubles, %v s for 65536", small, large)
	}
	l.GroupStart(tid)
	l.GroupStart(tid)
	if est, err := l.GroupSimulateEnd(tid); err != nil || est >= 0 || !l.groups.in(tid) {
		t.Fatalf("inner simulate end: %v, %v, in group %v", est, err, l.groups.in(tid))
	}
	if err := l.GroupEnd(tid); err != nil || l.groups.in(tid) {
		t.Fatalf("outer end: %v, in group %v", err, l.groups.in(tid))
	}
	if _, err := l.GroupSimulateEnd(tid); err == nil {
		t.Fatal("a simulate end outside a group succeeded")
	}
	checkSum(t, l, tid, hs, [][]float64{f64s(100, func(i int) float64 { return float64(i) }), f64s(100, func(i int) float64 { return -3 })})
}

// TestRefusalKeepsCommunicator: a call refused on one rank (a PreMulSum op
// used on another datatype) fails that call only: the next calls work.
func TestRefusalKeepsCommunicator(t *testing.T) {
	l, hs := hostLib(t, 2)
	const tid = 13
	half := dtype.Float16
	scalar := make([]byte, 2)
	dtype.Put(scalar, 0, half, 0.5)
	op, err := l.CreatePreMulSum(hs[0], scalar, 0, ScalarHostImmediate, ncclFloat16)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]float64, 8)
	err = l.Coll(tid, hs[0], Call{Kind: AllReduce, Send: ptr(in), Recv: ptr(in), Count: 8, Type: ncclFloat64, Op: op})
	if err == nil || ResultOf(err) != InvalidArgument {
		t.Fatalf("PreMulSum of half on double: %v", err)
	}
	if r, err := l.AsyncError(hs[0]); err != nil || r != Success {
		t.Fatalf("after a refusal, ncclCommGetAsyncError = %v, %v", r, err)
	}
	checkSum(t, l, tid, hs, [][]float64{f64s(10, func(i int) float64 { return float64(i) }), f64s(10, func(i int) float64 { return 7 })})
}

// The datatypes the PreMulSum tests sweep, with their ncclDataType_t codes.
var (
	preMulTypes = []dtype.DType{dtype.Float16, dtype.BFloat16, dtype.Float32, dtype.Float64, dtype.Int32}
	preMulCodes = map[dtype.DType]int32{dtype.Float16: ncclFloat16, dtype.BFloat16: ncclBfloat16, dtype.Float32: ncclFloat32, dtype.Float64: ncclFloat64, dtype.Int32: ncclInt32}
)

// TestPreMulSumHost: PreMulSum allreduce and reduce-scatter on host buffers
// in every floating type, with host-immediate and device-resident scalars
// (host memory: no CUDA in the process), read in the op's datatype;
// checked against float64 (exactly where every product and sum is exact
// in the type, within its tolerance for 1/3).
func TestPreMulSumHost(t *testing.T) {
	l, hs := hostLib(t, 2)
	const tid = 14
	preMulCases(t, func(t *testing.T, dt dtype.DType, residence int, kind Kind, s [2]float64) {
		const count = 96
		n := len(hs)
		sendN := count
		if kind == ReduceScatter {
			sendN = count * n
		}
		var sends, recvs, scalars [][]byte
		var ops []int32
		for r := range hs {
			sc := make([]byte, dt.Size())
			dtype.Put(sc, 0, dt, s[r])
			scalars = append(scalars, sc)
			var op int32
			var err error
			if residence == ScalarHostImmediate {
				op, err = l.CreatePreMulSum(hs[r], sc, 0, residence, preMulCodes[dt])
			} else {
				op, err = l.CreatePreMulSum(hs[r], nil, uintptr(unsafe.Pointer(&sc[0])), residence, preMulCodes[dt])
			}
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, op)
			b := make([]byte, sendN*dt.Size())
			for i := range sendN {
				dtype.Put(b, i, dt, float64((i*(r+3))%17-8))
			}
			sends = append(sends, b)
			recvs = append(recvs, make([]byte, count*dt.Size()))
		}
		calls, end := hostGroup(l, tid, hs, func(r int) Call {
			return Call{Kind: kind, Send: unsafe.Pointer(&sends[r][0]), Recv: unsafe.Pointer(&recvs[r][0]), Count: count, Type: preMulCodes[dt], Op: ops[r]}
		})
		for r, err := range calls {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if end != nil {
			t.Fatal(end)
		}
		scale := make([]float64, len(hs))
		for q := range hs {
			scale[q] = dtype.Get(scalars[q], 0, dt)
		}
		for r := range hs {
			checkPreMul(t, dt, kind, s, r, count, sends, scale, recvs[r])
		}
		for r := range hs {
			if err := l.DestroyRedOp(hs[r], ops[r]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// checkPreMul checks rank r's count elements got of a PreMulSum call of
// kind: the sum over ranks q of sends[q] times scale[q] (exactly unless
// the scalars s hold 1/3).
func checkPreMul(t *testing.T, dt dtype.DType, kind Kind, s [2]float64, r, count int, sends [][]byte, scale []float64, got []byte) {
	t.Helper()
	exact := s[0] != 1.0/3
	for i := range count {
		at := i
		if kind == ReduceScatter {
			at = r*count + i
		}
		want := 0.0
		for q := range sends {
			want += dtype.Get(sends[q], at, dt) * scale[q]
		}
		g := dtype.Get(got, i, dt)
		if exact && g != want || !exact && math.Abs(g-want) > 4*dtype.Tolerance(dt)*(1+math.Abs(want)) {
			t.Fatalf("rank %d element %d = %v, want %v", r, i, g, want)
		}
	}
}

// preMulCases runs f as a subtest for each type of preMulTypes, each
// scalar residence, allreduce and reduce-scatter, and each pair of
// scalars (exact ones for the integers).
func preMulCases(t *testing.T, f func(t *testing.T, dt dtype.DType, residence int, kind Kind, s [2]float64)) {
	for _, dt := range preMulTypes {
		for _, residence := range []int{ScalarHostImmediate, ScalarDevice} {
			for _, kind := range []Kind{AllReduce, ReduceScatter} {
				pairs := [][2]float64{{0.5, 0.25}, {1.0 / 3, 3}}
				if !dt.IsFloat() {
					pairs = [][2]float64{{2, -3}} // exact
				}
				for _, s := range pairs {
					t.Run(fmt.Sprintf("%s/res%d/%s/%g", dt, residence, kind, s[0]), func(t *testing.T) { f(t, dt, residence, kind, s) })
				}
			}
		}
	}
}
