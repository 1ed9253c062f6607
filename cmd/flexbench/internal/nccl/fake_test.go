package nccl

import (
	"fmt"
	"strings"
	"testing"
)

// fakeCall is one NCCL call the fake saw: the C function's name, its
// arguments as integers in the C order, and whether it ran inside a Runner.
type fakeCall struct {
	fn       string
	args     []uint64
	inRunner bool
}

func (c fakeCall) String() string {
	a := make([]string, len(c.args))
	for i, v := range c.args {
		a[i] = fmt.Sprint(v)
	}
	return fmt.Sprintf("%s(%s)", c.fn, strings.Join(a, ", "))
}

// fakeAPI implements api in memory. It records every call except the two
// error queries, returns fail[fn] (default ncclSuccess) from each, and
// answers errorString and lastError from desc and last. Each test makes its
// own.
type fakeAPI struct {
	calls   []fakeCall
	fail    map[string]Result
	desc    map[Result]string
	last    string
	lastFor []commHandle // comm arguments of lastError, in order
	version int
	id      UniqueID
	comm    commHandle // what commInitRank returns
	depth   *int       // current Runner nesting (see countingRunner); nil: none
}

func newFake() *fakeAPI {
	return &fakeAPI{fail: map[string]Result{}, desc: map[Result]string{}, comm: 0xc0ffee}
}

func (f *fakeAPI) record(fn string, args ...uint64) Result {
	f.calls = append(f.calls, fakeCall{fn: fn, args: args, inRunner: f.depth != nil && *f.depth > 0})
	return f.fail[fn]
}

func (f *fakeAPI) getVersion() (int, Result) { return f.version, f.record("ncclGetVersion") }

func (f *fakeAPI) getUniqueID() (UniqueID, Result) { return f.id, f.record("ncclGetUniqueId") }

func (f *fakeAPI) commInitRank(nranks int, id UniqueID, rank int) (commHandle, Result) {
	r := f.record("ncclCommInitRank", uint64(nranks), uint64(rank))
	f.id = id
	if r != Success {
		return 0, r
	}
	return f.comm, r
}

func (f *fakeAPI) commDestroy(c commHandle) Result { return f.record("ncclCommDestroy", uint64(c)) }

func (f *fakeAPI) allReduce(send, recv uintptr, count uint64, dt dataType, op redOp, c commHandle, stream uintptr) Result {
	return f.record("ncclAllReduce", uint64(send), uint64(recv), count, uint64(dt), uint64(op), uint64(c), uint64(stream))
}

func (f *fakeAPI) allGather(send, recv uintptr, sendCount uint64, dt dataType, c commHandle, stream uintptr) Result {
	return f.record("ncclAllGather", uint64(send), uint64(recv), sendCount, uint64(dt), uint64(c), uint64(stream))
}

func (f *fakeAPI) reduceScatter(send, recv uintptr, recvCount uint64, dt dataType, op redOp, c commHandle, stream uintptr) Result {
	return f.record("ncclReduceScatter", uint64(send), uint64(recv), recvCount, uint64(dt), uint64(op), uint64(c), uint64(stream))
}

func (f *fakeAPI) broadcast(send, recv uintptr, count uint64, dt dataType, root int, c commHandle, stream uintptr) Result {
	return f.record("ncclBroadcast", uint64(send), uint64(recv), count, uint64(dt), uint64(root), uint64(c), uint64(stream))
}

func (f *fakeAPI) reduce(send, recv uintptr, count uint64, dt dataType, op redOp, root int, c commHandle, stream uintptr) Result {
	return f.record("ncclReduce", uint64(send), uint64(recv), count, uint64(dt), uint64(op), uint64(root), uint64(c), uint64(stream))
}

func (f *fakeAPI) send(buf uintptr, count uint64, dt dataType, peer int, c commHandle, stream uintptr) Result {
	return f.record("ncclSend", uint64(buf), count, uint64(dt), uint64(peer), uint64(c), uint64(stream))
}

func (f *fakeAPI) recv(buf uintptr, count uint64, dt dataType, peer int, c commHandle, stream uintptr) Result {
	return f.record("ncclRecv", uint64(buf), count, uint64(dt), uint64(peer), uint64(c), uint64(stream))
}

func (f *fakeAPI) groupStart() Result { return f.record("ncclGroupStart") }

func (f *fakeAPI) groupEnd() Result { return f.record("ncclGroupEnd") }

func (f *fakeAPI) errorString(r Result) string { return f.desc[r] }

func (f *fakeAPI) lastError(c commHandle) string {
	f.lastFor = append(f.lastFor, c)
	return f.last
}

// countingRunner is a Runner that tracks its nesting in *depth (which the
// fake reads to mark calls made inside it) and counts its invocations.
// wantCalls checks the functions called, in order (their names, a space
// between).
func (f *fakeAPI) wantCalls(t *testing.T, want string) {
	t.Helper()
	var names []string
	for _, call := range f.calls {
		names = append(names, call.fn)
	}
	if got := strings.Join(names, " "); got != want {
		t.Errorf("calls %q, want %q", got, want)
	}
}

type countingRunner struct {
	depth int
	calls int
}

func (r *countingRunner) run(call func() error) error {
	r.calls++
	r.depth++
	defer func() { r.depth-- }()
	return call()
}

// fakeComm returns a new fake and a Comm of n ranks at rank made
// with a countingRunner the fake observes. It records no calls.
func fakeComm(n, rank int) (*fakeAPI, *countingRunner, *Comm, error) {
	f := newFake()
	cr := &countingRunner{}
	f.depth = &cr.depth
	c, err := (&Lib{api: f, path: "fake"}).InitRankOn(n, rank, UniqueID{}, cr.run)
	f.calls, cr.calls = nil, 0
	return f, cr, c, err
}

var _ api = (*fakeAPI)(nil)
