package direct

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestGPUFakeAsync: the case sweep with enqueue-and-return on
// (collectives/plane/async.go): on the leader path of ranks sharing one GPU
// and on the handshake paths of ranks on their own GPUs (flag kernels
// off), every call is handed to the DeviceComm's engine and every result
// matches the float64 reference.
func TestGPUFakeAsync(t *testing.T) {
	const big = 20_000
	for _, tc := range []struct {
		n, gpus int
	}{{2, 1}, {4, 1}, {3, 3}} {
		t.Run(fmt.Sprintf("%dranks-%dgpus", tc.n, tc.gpus), func(t *testing.T) {
			env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "0", "FLEXLINK_GPU_FLAG_COLL_BYTES": "0"}
			rs := fakeRanksOn(t, tc.n, tc.gpus, gpufake.Config{}, env, nil, tc.n*big*8)
			for _, r := range rs {
				if err := r.dc.Async(testCtx(t, 120*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			cases := devCases(tc.n, big)
			sweep(t, rs, cases)
			for _, r := range rs {
				if h := r.dc.Handed(); h == 0 {
					t.Errorf("rank %d: the engine ran no call", r.c.Rank())
				}
			}
		})
	}
}
