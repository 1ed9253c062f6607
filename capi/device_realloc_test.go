package capi

import (
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestDeviceReallocated: memory freed and allocated again at the same
// address (PyTorch's caching allocator after empty_cache) is a new
// allocation: an allreduce on it reads the new bytes on every rank,
// whichever ranks re-allocated. The stale mapping of the old allocation
// gave every element wrong before the driver's buffer id was checked.
func TestDeviceReallocated(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"flag", nil}, // the flag kernels: peers' user buffers are not mapped
		{"read", []string{"FLEXLINK_GPU_FLAG_BYTES", "0", "FLEXLINK_GPU_ALLREDUCE", "read"}},
		{"push", []string{"FLEXLINK_GPU_FLAG_BYTES", "0", "FLEXLINK_GPU_ALLREDUCE", "push"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testReallocated(t, tc.env) })
	}
}

func testReallocated(t *testing.T, env []string) {
	f := newDevFixture(t, 2, gpufake.Config{ReuseFreed: true}, env...)
	const count = 4096
	bufs := []*gpu.Buffer{f.alloc(0, 4*count, false), f.alloc(1, 4*count, false)}
	value := func(round, r, i int) float32 { return float32((round*7+r*3+i)%251) - 100 }
	for round, realloc := range [][2]bool{{false, false}, {true, true}, {true, false}, {false, true}, {true, true}, {true, true}} {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			for r, again := range realloc {
				if again {
					bufs[r] = f.reallocAt(t, r, bufs[r])
				}
			}
			for r := range bufs {
				v := make([]float32, count)
				for i := range v {
					v[i] = value(round, r, i)
				}
				f.upload(r, bufs[r], float32s(v))
			}
			if err := f.group(func(r int) Call {
				return Call{Kind: AllReduce, Send: devPtr(bufs[r]), Recv: devPtr(bufs[r]), Count: count, Type: ncclFloat32, Stream: f.ss[r].Handle()}
			}); err != nil {
				t.Fatal(err)
			}
			for r := range bufs {
				wrong := 0
				for i, got := range fromFloat32s(f.download(r, bufs[r], 4*count)) {
					if want := value(round, 0, i) + value(round, 1, i); got != want {
						wrong++
					}
				}
				if wrong > 0 {
					t.Errorf("rank %d: %d of %d elements wrong", r, wrong, count)
				}
			}
		})
	}
}
