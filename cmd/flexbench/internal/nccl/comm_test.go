package nccl

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// mustC is NCCL's value for x (ncclType, ncclOp), as the fake records it.
func mustC[X any, V dataType | redOp](t *testing.T, f func(X) (V, error), x X) uint64 {
	t.Helper()
	v, err := f(x)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(v)
}

// TestCollectiveCalls checks that each method makes exactly one NCCL call,
// with the arguments in the C order, inside the Runner.
func TestCollectiveCalls(t *testing.T) {
	const send, recv, stream = 0x7000_0000, 0x7100_0000, 0x55
	for _, dt := range dtype.All() {
		for _, op := range dtype.Ops() {
			f, cr, c, err := fakeComm(4, 1)
			if err != nil {
				t.Fatal(err)
			}
			h, ty, o := uint64(c.h), mustC(t, ncclType, dt), mustC(t, ncclOp, op)
			cases := []struct {
				do   func() error
				want fakeCall
			}{
				{func() error { return c.AllReduce(send, recv, 7, dt, op, stream) },
					fakeCall{"ncclAllReduce", []uint64{send, recv, 7, ty, o, h, stream}, true}},
				{func() error { return c.AllGather(send, recv, 9, dt, stream) },
					fakeCall{"ncclAllGather", []uint64{send, recv, 9, ty, h, stream}, true}},
				{func() error { return c.ReduceScatter(send, recv, 3, dt, op, stream) },
					fakeCall{"ncclReduceScatter", []uint64{send, recv, 3, ty, o, h, stream}, true}},
				{func() error { return c.Broadcast(send, recv, 5, dt, 3, stream) },
					fakeCall{"ncclBroadcast", []uint64{send, recv, 5, ty, 3, h, stream}, true}},
				{func() error { return c.Reduce(send, recv, 6, dt, op, 2, stream) },
					fakeCall{"ncclReduce", []uint64{send, recv, 6, ty, o, 2, h, stream}, true}},
				{func() error { return c.Send(send, 11, dt, 0, stream) },
					fakeCall{"ncclSend", []uint64{send, 11, ty, 0, h, stream}, true}},
				{func() error { return c.Recv(recv, 12, dt, 3, stream) },
					fakeCall{"ncclRecv", []uint64{recv, 12, ty, 3, h, stream}, true}},
			}
			for _, tc := range cases {
				f.calls, cr.calls = nil, 0
				if err := tc.do(); err != nil {
					t.Fatalf("%v %v %s: %v", dt, op, tc.want.fn, err)
				}
				if len(f.calls) != 1 || !reflect.DeepEqual(f.calls[0], tc.want) || cr.calls != 1 {
					t.Fatalf("%v %v: calls %+v in %d runs, want %+v in one run",
						dt, op, f.calls, cr.calls, tc.want)
				}
			}
		}
	}
}

// TestAllToAllGroup checks the group AllToAll makes: one ncclSend and one
// ncclRecv per rank, at byte offsets of whole blocks, between one
// ncclGroupStart and one ncclGroupEnd, all within one Runner call.
func TestAllToAllGroup(t *testing.T) {
	const send, recv, stream = 0x10000, 0x90000, 7
	for _, n := range []int{1, 2, 5} {
		for _, dt := range []dtype.DType{dtype.Int8, dtype.BFloat16, dtype.Float64} {
			f, cr, c, err := fakeComm(n, n-1)
			if err != nil {
				t.Fatal(err)
			}
			const per = 13
			if err := c.AllToAll(send, recv, per, dt, stream); err != nil {
				t.Fatal(err)
			}
			h, ty := uint64(c.h), mustC(t, ncclType, dt)
			want := []fakeCall{{"ncclGroupStart", nil, true}}
			for p := 0; p < n; p++ {
				off := uint64(p * per * dt.Size())
				want = append(want,
					fakeCall{"ncclSend", []uint64{send + off, per, ty, uint64(p), h, stream}, true},
					fakeCall{"ncclRecv", []uint64{recv + off, per, ty, uint64(p), h, stream}, true})
			}
			want = append(want, fakeCall{"ncclGroupEnd", nil, true})
			if !reflect.DeepEqual(f.calls, want) {
				t.Errorf("n=%d %v:\n got %v\nwant %v", n, dt, f.calls, want)
			}
			if cr.calls != 1 {
				t.Errorf("n=%d %v: %d Runner calls, want 1 (the group must stay on one thread)", n, dt, cr.calls)
			}
		}
	}
}

// TestAllToAllFailureClosesGroup: a failing ncclRecv stops the loop, the
// group is still closed, and the Recv's error is returned.
func TestAllToAllFailureClosesGroup(t *testing.T) {
	f, _, c, err := fakeComm(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.fail["ncclRecv"] = InvalidArgument
	f.fail["ncclGroupEnd"] = InvalidUsage
	err = c.AllToAll(0x100, 0x200, 4, dtype.Int32, 0)
	var e *Error
	if !errors.As(err, &e) || e.Func != "ncclRecv" {
		t.Fatalf("error %v, want the ncclRecv failure", err)
	}
	f.wantCalls(t, "ncclGroupStart ncclSend ncclRecv ncclGroupEnd")
}

func TestGroup(t *testing.T) {
	f, _, c, err := fakeComm(2, 0)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = c.Group(func() error {
		if err := c.Send(0x10, 1, dtype.Uint8, 1, 0); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("Group returned %v, want f's error", err)
	}
	f.wantCalls(t, "ncclGroupStart ncclSend ncclGroupEnd")
	f.calls = nil
	f.fail["ncclGroupEnd"] = RemoteError
	if err := c.Group(func() error { return nil }); !errors.Is(err, errs.ErrPeerLost) {
		t.Errorf("Group with failing ncclGroupEnd: %v", err)
	}
}

// TestValidation: bad arguments are rejected before NCCL is called.
func TestValidation(t *testing.T) {
	f, _, c, err := fakeComm(4, 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := dtype.DType(77)
	for name, do := range map[string]func() error{
		"negative count":    func() error { return c.AllReduce(1, 2, -1, dtype.Float32, dtype.Sum, 0) },
		"bad op":            func() error { return c.ReduceScatter(1, 2, 1, dtype.Float32, dtype.Op(9), 0) },
		"bad dtype":         func() error { return c.AllGather(1, 2, 1, bad, 0) },
		"root too big":      func() error { return c.Broadcast(1, 2, 1, dtype.Int8, 4, 0) },
		"negative root":     func() error { return c.Reduce(1, 2, 1, dtype.Int8, dtype.Max, -1, 0) },
		"peer too big":      func() error { return c.Send(1, 1, dtype.Int8, 4, 0) },
		"negative peer":     func() error { return c.Recv(1, 1, dtype.Int8, -2, 0) },
		"alltoall negative": func() error { return c.AllToAll(1, 2, -3, dtype.Int8, 0) },
	} {
		err := do()
		if err == nil || !strings.HasPrefix(err.Error(), "nccl rank 0 of 4: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("NCCL called with bad arguments: %v", f.calls)
	}
	if err := c.AllGather(1, 2, 1, bad, 0); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("bad dtype: %v, want ErrNotSupported", err)
	}
}

func TestInitRank(t *testing.T) {
	f := newFake()
	cr := &countingRunner{}
	f.depth = &cr.depth
	l := &Lib{api: f, path: "fake"}
	var id UniqueID
	for i := range id {
		id[i] = byte(i*7 + 3)
	}
	c, err := l.InitRankOn(8, 5, id, cr.run)
	if err != nil {
		t.Fatal(err)
	}
	want := []fakeCall{{"ncclCommInitRank", []uint64{8, 5}, true}}
	if !reflect.DeepEqual(f.calls, want) || f.id != id || cr.calls != 1 {
		t.Errorf("calls %v, id passed %v", f.calls, f.id == id)
	}
	if c.Size() != 8 || c.Rank() != 5 || c.h != f.comm {
		t.Errorf("comm %d of %d, handle %#x", c.Rank(), c.Size(), c.h)
	}

	// Without a Runner the call is made directly.
	f.calls = nil
	if _, err := l.InitRank(2, 0, id); err != nil || len(f.calls) != 1 || f.calls[0].inRunner {
		t.Errorf("InitRank: %v, calls %v", err, f.calls)
	}

	for _, nr := range [][2]int{{0, 0}, {4, 4}, {4, -1}} {
		f.calls = nil
		if _, err := l.InitRank(nr[0], nr[1], id); err == nil || len(f.calls) != 0 {
			t.Errorf("InitRank(%d, %d): %v, calls %v", nr[0], nr[1], err, f.calls)
		}
	}

	f.fail["ncclCommInitRank"] = SystemError
	f.desc[SystemError] = "unhandled system error"
	f.last = "bootstrap: connection refused"
	_, err = l.InitRank(2, 1, id)
	if want := "nccl rank 1 of 2: init: ncclCommInitRank: unhandled system error (ncclSystemError): bootstrap: connection refused"; err == nil || err.Error() != want {
		t.Errorf("failed init: %v\nwant %s", err, want)
	}

	runnerErr := fmt.Errorf("set context: %w", errs.ErrNotSupported)
	delete(f.fail, "ncclCommInitRank")
	f.calls = nil
	_, err = l.InitRankOn(2, 0, id, func(func() error) error { return runnerErr })
	if !errors.Is(err, errs.ErrNotSupported) || len(f.calls) != 0 {
		t.Errorf("failing Runner: %v, calls %v", err, f.calls)
	}
}

func TestDestroy(t *testing.T) {
	f, cr, c, err := fakeComm(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	want := []fakeCall{{"ncclCommDestroy", []uint64{uint64(c.h)}, true}}
	if !reflect.DeepEqual(f.calls, want) || cr.calls != 1 {
		t.Errorf("calls %v", f.calls)
	}
	f.calls = nil
	if err := c.Destroy(); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("second Destroy: %v", err)
	}
	if err := c.AllReduce(1, 2, 3, dtype.Float32, dtype.Sum, 0); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("AllReduce after Destroy: %v", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("NCCL called after Destroy: %v", f.calls)
	}
}
