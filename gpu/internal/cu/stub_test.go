package cu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flexlink/flexlink/internal/ccall"
	"github.com/flexlink/flexlink/internal/testenv"
)

// stubDriver compiles a libcuda of C stubs, one for every entry point the
// binding resolves: each records its arguments (as 12 integers; the
// caller passes fewer) and returns 0, or 1 (CUDA_ERROR_INVALID_VALUE) when
// its first argument is 0xdead. cuCtxGetCurrent and
// cuStreamGetCaptureInfo write known values to their out-parameters;
// cuGetErrorName and cuGetErrorString name the stub's error. It returns
// the library's path and fl_stub_last (argument i of the last call; i = 0
// is the entry point's sym, 1-12 its arguments).
func stubDriver(t testing.TB) (string, func(i int) uintptr) {
	t.Helper()
	var src strings.Builder
	src.WriteString(`#include <stdint.h>
typedef uintptr_t u;
static u rec[13];
u fl_stub_last(u i) { return i < 13 ? rec[i] : 0; }
#define ARGS u a1, u a2, u a3, u a4, u a5, u a6, u a7, u a8, u a9, u a10, u a11, u a12
#define REC(id) u v[13] = {id, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12}; for (int k = 0; k < 13; k++) rec[k] = v[k]
`)
	for s, cands := range symbols() {
		name := cands[0]
		body := "return a1 == 0xdead ? 1 : 0;"
		switch name {
		case "cuCtxGetCurrent":
			body = "*(u*)a1 = 0xc0ffee; return 0;"
		case "cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2":
			body = "*(int*)a2 = 1; *(unsigned long long*)a3 = 77; *(u*)a4 = 0x6a; return 0;"
		case "cuGetErrorName":
			body = `*(const char**)a2 = "CUDA_ERROR_STUB"; return 0;`
		case "cuGetErrorString":
			body = `*(const char**)a2 = "the stub's failure"; return 0;`
		}
		fmt.Fprintf(&src, "int %s(ARGS) { REC(%d); %s }\n", name, s, body)
	}
	so := testenv.CSharedLib(t, src.String())
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	last, err := purego.Dlsym(h, "fl_stub_last")
	if err != nil {
		t.Fatal(err)
	}
	return so, func(i int) uintptr { return ccall.Call(last, uintptr(i)) }
}

// TestDriverCallsReachTheDriver: the binding's calls reach the driver's
// entry points with their arguments in order, whichever way internal/ccall goes
// (cgo, or purego without cgo: CGO_ENABLED=0 go test ./gpu/internal/cu),
// out-parameters come back, a failure is the driver's error, and a call
// allocates at most its argument slice (go:uintptrescapes keeps it on the
// heap for the call).
func TestDriverCallsReachTheDriver(t *testing.T) {
	so, last := stubDriver(t)
	l, err := Load(so)
	if err != nil {
		t.Fatal(err)
	}
	params := []unsafe.Pointer{unsafe.Pointer(&struct{ x int }{1})}
	pp := uintptr(unsafe.Pointer(&params[0]))
	for _, tc := range []struct {
		name string
		s    sym
		call func() error
		want []uintptr
	}{
		{"cuLaunchKernel", sLaunchKernel, func() error {
			return l.LaunchKernel(Function(0x11), [3]uint32{2, 3, 4}, [3]uint32{5, 6, 7}, 8, Stream(0x99), params)
		}, []uintptr{0x11, 2, 3, 4, 5, 6, 7, 8, 0x99, pp, 0}},
		{"cuMemcpyAsync", sMemcpyAsync, func() error { return l.MemcpyAsync(0x1000, 0x2000, 48, Stream(0x99)) }, []uintptr{0x1000, 0x2000, 48, 0x99}},
		{"cuStreamWaitEvent", sStreamWaitEvent, func() error { return l.StreamWaitEvent(Stream(0x99), Event(0x21)) }, []uintptr{0x99, 0x21, 0}},
		{"cuEventRecord", sEventRecord, func() error { return l.EventRecord(Event(0x21), Stream(0x99)) }, []uintptr{0x21, 0x99}},
		{"cuCtxSetCurrent", sCtxSetCurrent, func() error { return l.CtxSetCurrent(Context(0x31)) }, []uintptr{0x31}},
	} {
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := sym(last(0)); got != tc.s {
			t.Errorf("%s reached entry point %d, want %d", tc.name, got, tc.s)
		}
		for i, w := range tc.want {
			if got := last(i + 1); got != w {
				t.Errorf("%s: argument %d = %#x, want %#x", tc.name, i+1, got, w)
			}
		}
	}
	if c, err := l.CtxGetCurrent(); err != nil || c != Context(0xc0ffee) {
		t.Errorf("CtxGetCurrent = %#x, %v; want 0xc0ffee", uintptr(c), err)
	}
	if st, id, g, err := l.StreamCaptureInfo(Stream(0x99)); err != nil || st != CaptureActive || id != 77 || g != Graph(0x6a) {
		t.Errorf("StreamCaptureInfo = %v, %d, %#x, %v; want active, 77, 0x6a", st, id, uintptr(g), err)
	}
	err = l.MemcpyAsync(0xdead, 0x2000, 48, Stream(0x99))
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != 1 || ce.Func != "cuMemcpyAsync" || ce.Name != "CUDA_ERROR_STUB" || ce.Desc != "the stub's failure" {
		t.Errorf("a failed cuMemcpyAsync: %v (%#v)", err, ce)
	}
	if n := testing.AllocsPerRun(100, func() { _ = l.EventRecord(Event(0x21), Stream(0x99)) }); n > 1 {
		t.Errorf("cuEventRecord allocated %v times a call, want at most 1", n)
	}
}

// BenchmarkDriverCall is one cuEventRecord into the stub driver: the
// binding's own cost per driver call (cgo; CGO_ENABLED=0 for purego).
func BenchmarkDriverCall(b *testing.B) {
	so, _ := stubDriver(b)
	l, err := Load(so)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = l.EventRecord(Event(0x21), Stream(0x99))
	}
}
