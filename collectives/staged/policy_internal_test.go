package staged

import (
	"testing"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
)

// TestDefaultPolicy: New (FLEXLINK_GPU_STAGED_CHUNK_BYTES=auto) pipelines
// the data-movement collectives over two chunks and keeps reductions
// whole; NewChunked pipelines every kind; a chunk of 0 none.
func TestDefaultPolicy(t *testing.T) {
	big := 3 * DefaultChunk / 4 // float32 elements: three chunks
	small := DefaultChunk / 4   // one chunk
	auto := New(nil, nil).(*stagedPlane)
	all := NewChunked(nil, nil, DefaultChunk).(*stagedPlane)
	off := NewChunked(nil, nil, 0).(*stagedPlane)
	tests := []struct {
		kind           plane.Kind
		count          int
		auto, all, off bool
	}{
		{plane.AllReduce, big, false, true, false},
		{plane.Reduce, big, false, true, false},
		{plane.ReduceScatter, big, false, true, false},
		{plane.AllGather, big, true, true, false},
		{plane.Broadcast, big, true, true, false},
		{plane.AllGather, small, false, false, false},
		{plane.AllReduce, small, false, false, false},
	}
	for _, tc := range tests {
		o := &plane.Op{Kind: tc.kind, Count: tc.count, DT: dtype.Float32}
		for _, p := range []struct {
			name string
			pl   *stagedPlane
			want bool
		}{{"auto", auto, tc.auto}, {"all", all, tc.all}, {"off", off, tc.off}} {
			if got := p.pl.pipelined(o); got != p.want {
				t.Errorf("%s: %v of %d floats pipelined = %v, want %v", p.name, tc.kind, tc.count, got, p.want)
			}
		}
	}
}
