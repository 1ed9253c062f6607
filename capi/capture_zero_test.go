package capi

import (
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestCaptureZeroCount: a call of count 0 on a capturing stream is nothing
// to do, as eagerly and as in NCCL (nccl-tests -G starts its sweeps at 0
// bytes): every collective captures, and the graphs replay.
func TestCaptureZeroCount(t *testing.T) {
	f := newDevFixture(t, 2, gpufake.Config{})
	buf := []*gpu.Buffer{f.alloc(0, 64, false), f.alloc(1, 64, false)}
	for _, kind := range []Kind{AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, Reduce} {
		t.Run(kind.String(), func(t *testing.T) {
			xs, err := f.captureGroup(gpu.CaptureGlobal, func(r int, s uintptr) []Call {
				return []Call{{Kind: kind, Send: devPtr(buf[r]), Recv: devPtr(buf[r]), Count: 0, Type: ncclFloat32, Stream: s}}
			})
			if err != nil {
				t.Fatalf("capture of a count-0 %s: %v", kind, err)
			}
			defer func() {
				for _, x := range xs {
					x.Close()
				}
			}()
			if err := f.replay(xs); err != nil {
				t.Fatalf("replay: %v", err)
			}
		})
	}
}
