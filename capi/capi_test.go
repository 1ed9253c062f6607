package capi

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

func TestDataTypeAndOps(t *testing.T) {
	want := map[int32]dtype.DType{0: dtype.Int8, 1: dtype.Uint8, 2: dtype.Int32, 3: dtype.Uint32, 4: dtype.Int64, 5: dtype.Uint64,
		6: dtype.Float16, 7: dtype.Float32, 8: dtype.Float64, 9: dtype.BFloat16, 10: dtype.Float8E4M3, 11: dtype.Float8E5M2}
	for code := int32(-1); code < 14; code++ {
		got, err := DataType(code)
		if w, ok := want[code]; ok {
			if err != nil || got != w {
				t.Errorf("DataType(%d) = %v, %v; want %v", code, got, err, w)
			}
		} else if ResultOf(err) != InvalidArgument {
			t.Errorf("DataType(%d): %v, want ncclInvalidArgument", code, err)
		}
	}
	ops := map[int32]dtype.Op{0: dtype.Sum, 1: dtype.Prod, 2: dtype.Max, 3: dtype.Min, 4: dtype.Avg}
	for code := int32(-1); code < 7; code++ {
		got, ok := builtinOp(code)
		if w, known := ops[code]; ok != known || (known && got != w) {
			t.Errorf("builtinOp(%d) = %v, %v", code, got, ok)
		}
	}
}

func TestUniqueID(t *testing.T) {
	info, err := newIDInfo(netip.MustParseAddrPort("10.1.2.3:29500"))
	if err != nil {
		t.Fatal(err)
	}
	id := info.encode()
	got, err := decodeID(id)
	if err != nil || got.Addr != info.Addr || string(got.Secret) != string(info.Secret) || got.Nonce != info.Nonce {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, info)
	}
	other, _ := newIDInfo(info.Addr)
	if other.JobID() == info.JobID() || string(other.Secret) == string(info.Secret) {
		t.Error("two ids share a job id or secret")
	}
	for name, mutate := range map[string]func(*UniqueID){
		"zeroes":    func(u *UniqueID) { *u = UniqueID{} },
		"version":   func(u *UniqueID) { u[4] = 9 },
		"corrupted": func(u *UniqueID) { u[30] ^= 1 },
	} {
		u := id
		mutate(&u)
		if _, err := decodeID(u); ResultOf(err) != InvalidArgument {
			t.Errorf("%s: %v, want ncclInvalidArgument", name, err)
		}
	}
}

func TestResultOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Result
	}{
		{nil, Success},
		{fmt.Errorf("x: %w", errs.ErrMismatch), InvalidUsage},
		{fmt.Errorf("x: %w", errs.ErrPeerLost), RemoteError},
		{fmt.Errorf("x: %w", errs.ErrAborted), RemoteError},
		{fmt.Errorf("x: %w", errs.ErrNotSupported), InvalidArgument},
		{fail(InvalidUsage, "y"), InvalidUsage},
		{errors.New("other"), SystemError},
	} {
		if got := ResultOf(tc.err); got != tc.want {
			t.Errorf("ResultOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if ErrorString(InProgress) == "" || ErrorString(99) == "" || Result(99).String() != "ncclResult(99)" {
		t.Error("error strings")
	}
}

// TestGroupInitsOneThread is nccl-tests -g 2: one thread creates both ranks
// of a communicator inside a group, then runs an allreduce on both in one
// group, on host buffers.
func TestGroupInitsOneThread(t *testing.T) {
	l := New(Options{Env: settings.Map(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s"})})
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	const tid = 1
	l.GroupStart(tid)
	var hs [2]uintptr
	for r := range 2 {
		if hs[r], err = l.InitRank(tid, 2, id, r, DefaultConfig()); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.GroupEnd(tid); err != nil {
		t.Fatal(err)
	}
	bufs := [2][]float32{{1, 2, 3}, {10, 20, 30}}
	l.GroupStart(tid)
	for r := range 2 {
		p := unsafe.Pointer(&bufs[r][0])
		if err := l.Coll(tid, hs[r], Call{Kind: AllReduce, Send: p, Recv: p, Count: 3, Type: ncclFloat32, Op: 0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.GroupEnd(tid); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if fmt.Sprint(bufs[r]) != "[11 22 33]" {
			t.Errorf("rank %d: %v, want [11 22 33]", r, bufs[r])
		}
	}
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.Destroy(h) }()
	}
	wg.Wait()
	if _, err := l.AsyncError(hs[0]); ResultOf(err) != InvalidArgument {
		t.Errorf("a destroyed handle: %v, want ncclInvalidArgument", err)
	}
}
