package staged

import (
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestPipelineStaging: a pipelined call takes no more pinned staging than
// the same call unpipelined, for every kind the pipeline cuts, rooted
// calls on the root and off it, and several communicator sizes.
func TestPipelineStaging(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	dev, err := drv.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 64 << 10
	const count = 100_003 // float32: 6.1 chunks
	buf, err := dev.Alloc(8 * count * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	elems := func(k int) int { return k * count * 4 }
	for _, size := range []int{2, 3, 8} {
		cases := []struct {
			name       string
			kind       plane.Kind
			send, recv int // blocks of count elements; -1: none
			root       int
		}{
			{"allreduce", plane.AllReduce, 1, 1, 0},
			{"broadcast root", plane.Broadcast, 1, 1, 0},
			{"broadcast non-root", plane.Broadcast, -1, 1, 1},
			{"reduce root", plane.Reduce, 1, 1, 0},
			{"reduce non-root", plane.Reduce, 1, -1, 1},
			{"allgather", plane.AllGather, 1, size, 0},
			{"reducescatter", plane.ReduceScatter, size, 1, 0},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%d-ranks/%s", size, tc.name), func(t *testing.T) {
				o := &plane.Op{Kind: tc.kind, Count: count, DT: dtype.Float32, Op: dtype.Sum, Root: tc.root}
				if tc.send >= 0 {
					o.Send = buf.Sub(0, elems(tc.send))
				}
				if tc.recv >= 0 {
					o.Recv = buf.Sub(0, elems(tc.recv))
				}
				p := &stagedPlane{chunk: chunk}
				if !p.pipelined(o) {
					t.Fatalf("not pipelined")
				}
				sb, rb := wholeStaging(o)
				k := cut{o: o, rank: 0, size: size, chunk: chunk}
				if got := k.staging(); got > sb+rb {
					t.Errorf("pipelined staging %d bytes, unpipelined %d", got, sb+rb)
				}
			})
		}
	}
	// A group takes the sum of its messages either way.
	o := &plane.Op{Kind: plane.Group, DT: dtype.Uint8, P2P: []plane.P2P{
		plane.SendTo(1, buf.Sub(0, 300_001)), plane.RecvFrom(1, buf.Sub(0, 1000)), plane.RecvFrom(1, buf.Sub(0, 0)),
	}}
	if !(&stagedPlane{chunk: chunk}).pipelined(o) {
		t.Fatalf("group not pipelined")
	}
	if got, want := (cut{o: o, size: 2, chunk: chunk}).staging(), 301_001; got != want {
		t.Errorf("group: pipelined staging %d bytes, unpipelined %d", got, want)
	}
}
