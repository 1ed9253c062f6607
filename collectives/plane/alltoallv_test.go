package plane

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

// runCaller is rank 1 of 3; Run calls f at once.
type runCaller struct{ fakeCaller }

func (runCaller) Rank() int { return 1 }
func (runCaller) Size() int { return 3 }
func (runCaller) Run(ctx context.Context, _ string, f func(context.Context) error) error {
	return f(ctx)
}

// recPlane records copies of the ops it is given (an Op is the caller's
// again once Do returns: Plane's contract); recVPlane also runs AllToAllv
// itself (VPlane).
type recPlane struct {
	fakePlane
	ops *[]*Op
}

func (p recPlane) Do(_ context.Context, o *Op, _ *gpu.Stream) error {
	cp := *o
	cp.P2P = slices.Clone(o.P2P)
	*p.ops = append(*p.ops, &cp)
	return nil
}

type recVPlane struct{ recPlane }

func (recVPlane) RunsAllToAllv() bool { return true }

// TestDeviceAllToAllv: on a plane that runs AllToAllv itself the call is
// one op with the byte counts; on another it is the rank's own block
// copied on the stream and a Group of the sends and receives with the
// other ranks (none for empty blocks); bad arguments fail before any op.
func TestDeviceAllToAllv(t *testing.T) {
	dev := fakeDevice(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	send, err1 := dev.Alloc(64)
	recv, err2 := dev.Alloc(64)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	host := make([]byte, 64)
	for i := range host {
		host[i] = byte(i + 1)
	}
	if err := s.CopyHtoD(send, host); err != nil {
		t.Fatal(err)
	}
	c := runCaller{fakeCaller{lg: hclog.NewNullLogger()}}
	ctx := context.Background()
	sc, rc := []int{2, 3, 0}, []int{1, 3, 4} // int32 elements; 3 to itself

	var ops []*Op
	d := NewDeviceComm(c, dev, "staged", recVPlane{recPlane{ops: &ops}})
	if err := d.AllToAllv(ctx, send, recv, sc, rc, dtype.Int32, s); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Kind != AllToAllv || !slices.Equal(ops[0].SendBytes, []int{8, 12, 0}) ||
		!slices.Equal(ops[0].RecvBytes, []int{4, 12, 16}) || ops[0].Send.Len() != 20 || ops[0].Recv.Len() != 32 {
		t.Errorf("VPlane: ops %+v", ops)
	}

	ops = nil
	d = NewDeviceComm(c, dev, "direct", recPlane{ops: &ops})
	if err := d.AllToAllv(ctx, send, recv, sc, rc, dtype.Int32, s); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Kind != Group {
		t.Fatalf("plane without AllToAllv: ops %+v", ops)
	}
	want := []P2P{SendTo(0, send.Sub(0, 8)), RecvFrom(0, recv.Sub(0, 4)), RecvFrom(2, recv.Sub(16, 16))}
	if got := ops[0].P2P; len(got) != len(want) {
		t.Errorf("group %+v, want %+v", got, want)
	} else {
		for i := range want {
			if got[i].Send != want[i].Send || got[i].Peer != want[i].Peer || got[i].Buf.Ptr() != want[i].Buf.Ptr() || got[i].Buf.Len() != want[i].Buf.Len() {
				t.Errorf("group entry %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	own := make([]byte, 12)
	if err := s.CopyDtoH(own, recv.Sub(4, 12)); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(own, host[8:20]) {
		t.Errorf("own block %v, want %v", own, host[8:20])
	}

	for _, tc := range []struct {
		name   string
		sc, rc []int
		dt     dtype.DType
		sb     *gpu.Buffer
		want   string
	}{
		{"counts", []int{1, 1}, rc, dtype.Int32, send, "2 send counts"},
		{"negative", []int{-1, 3, 0}, rc, dtype.Int32, send, "send count -1 for rank 0"},
		{"self", []int{2, 2, 0}, rc, dtype.Int32, send, "sends 8 bytes to itself but receives 12"},
		{"short", []int{2, 3, 20}, rc, dtype.Int32, send, "buffer holds 64 bytes, need 100"},
		{"nil", sc, rc, dtype.Int32, nil, "nil buffer"},
		{"dtype", sc, rc, dtype.DType(200), send, "invalid dtype"},
	} {
		ops = nil
		err := d.AllToAllv(ctx, tc.sb, recv, tc.sc, tc.rc, tc.dt, s)
		if err == nil || !strings.Contains(err.Error(), tc.want) || len(ops) != 0 {
			t.Errorf("%s: error %v (ops %d), want %q", tc.name, err, len(ops), tc.want)
		}
	}
}
