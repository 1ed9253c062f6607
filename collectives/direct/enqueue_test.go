package direct

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestGPUFakeEnqueueAnySize: with FLEXLINK_GPU_ENQUEUE=async every
// collective the flag kernels serve runs as a flag kernel at every size
// (the kernels meet their peers inside the GPU: nothing waits on the
// host), where with sync the calls past FLEXLINK_GPU_FLAG_COLL_BYTES take
// the handshake path (ready and done messages on the host). Each case is
// checked against the float64 reference and by which of the plane's call
// counters moved.
func TestGPUFakeEnqueueAnySize(t *testing.T) {
	const big = 20_000
	for _, tc := range []struct {
		n       int
		enqueue string
	}{{2, "async"}, {3, "async"}, {3, "sync"}} {
		t.Run(fmt.Sprintf("%dranks-%s", tc.n, tc.enqueue), func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_FLAG_COLL_BYTES": "4096", "FLEXLINK_GPU_ENQUEUE": tc.enqueue}
			rs := fakeRanksOn(t, tc.n, tc.n, gpufake.Config{}, env, nil, tc.n*big*8)
			ctx := testCtx(t, 120*time.Second)
			handshakes := 0 // calls past the eager limit that took the handshake path
			for _, c := range devCases(tc.n, big) {
				p := rs[0].dc.Plane().(*directPlane)
				flag0, hand0 := p.flag.State().Calls, p.seq.calls
				sweepCase(ctx, t, rs, c)
				if c.count == 0 || c.kind == plane.AllToAll && c.inPlace {
					continue // nothing to move; an in-place alltoall stages first
				}
				flag, hand := p.flag.State().Calls-flag0, p.seq.calls-hand0
				handshakes += int(hand)
				if tc.enqueue == "async" && (flag != 1 || hand != 0) {
					t.Errorf("%v: %d flag calls and %d handshakes, want the flag kernels only", c, flag, hand)
				}
			}
			if tc.enqueue == "sync" && handshakes == 0 {
				t.Error("sync: no call took the handshake path: the async runs prove nothing")
			}
		})
	}
}
