package capi

import (
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestWithheldDevice: on device buffers (the fake driver, the flag
// kernels) rank 1 of 2 makes four allreduces where rank 0 makes five.
// Rank 0's fifth is enqueued and ends on the device by the kernel
// timeout; ncclCommGetAsyncError reports it (ncclRemoteError), and
// ncclGetLastError, for the communicator and for the process, says that
// rank 1 has not called AllReduce #5, as torch's watchdog reads it.
func TestWithheldDevice(t *testing.T) {
	f, _ := newIDFixture(t, 2, gpufake.Config{}, "FLEXLINK_GPU_KERNEL_TIMEOUT", "2s", "FLEXLINK_TIMEOUT", "2s")
	const count = 256
	var calls [2]Call
	for r := range 2 {
		b := f.alloc(r, 4*count, false)
		f.upload(r, b, float32s(make([]float32, count)))
		calls[r] = Call{Kind: AllReduce, Send: devPtr(b), Recv: devPtr(b), Count: count, Type: ncclFloat32, Stream: f.ss[r].Handle()}
	}
	for i := range 4 {
		if err := f.group(func(r int) Call { return calls[r] }); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	start := time.Now()
	if err := f.l.Coll(fixtureTid, f.hs[0], calls[0]); err != nil {
		t.Fatalf("the fifth call on rank 0 was not enqueued: %v", err)
	}
	for {
		res, err := f.l.AsyncError(f.hs[0])
		if err != nil {
			t.Fatal(err)
		}
		if res == RemoteError {
			break
		}
		if res != Success && res != InProgress {
			t.Fatalf("ncclCommGetAsyncError %v, want ncclRemoteError", res)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("no async error 20 s after the withheld call")
		}
		<-time.After(10 * time.Millisecond) // the watchdog's poll
	}
	want := "rank 1 has not called AllReduce #5"
	for _, h := range []uintptr{f.hs[0], 0} {
		if last := f.l.LastError(h); !strings.Contains(last, want) {
			t.Errorf("ncclGetLastError(%#x) %q does not say %q", h, last, want)
		}
	}
	t.Logf("after %v: %s", time.Since(start), f.l.LastError(f.hs[0]))
}
