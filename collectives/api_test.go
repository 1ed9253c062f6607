package collectives_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/worldtest"
)

func TestConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		want    collectives.Config
		wantErr string
	}{
		{map[string]string{}, collectives.DefaultConfig(), ""},
		{map[string]string{"FLEXLINK_ALGO": "ring", "FLEXLINK_ALGO_THRESHOLD": "0", "FLEXLINK_CHUNK_BYTES": "4096"},
			collectives.Config{Algo: "ring", Threshold: 0, ChunkBytes: 4096}, ""},
		{map[string]string{"FLEXLINK_ALGO": "tree"}, collectives.Config{}, "FLEXLINK_ALGO"},
		{map[string]string{"FLEXLINK_CHUNK_BYTES": "big"}, collectives.Config{}, "FLEXLINK_CHUNK_BYTES"},
		{map[string]string{"FLEXLINK_ALGO_THRESHOLD": "-1"}, collectives.Config{}, "FLEXLINK_ALGO_THRESHOLD"},
	} {
		got, err := collectives.ConfigFromEnv(settings.Map(tc.env))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: %+v, %v; want %+v", tc.env, got, err, tc.want)
		}
	}
}

// TestInvalidCalls checks argument errors: reported at once, nothing sent,
// the call not numbered, the engine still usable.
func TestInvalidCalls(t *testing.T) {
	w := newWorld(2, fake.Options{}, collectives.Config{})
	e := w.engines[0]
	ctx := context.Background()
	b := make([]byte, 64)
	H := func(x []byte) collectives.HostBuffer { return collectives.HostBuffer(x) }
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"short recv", func() error { return e.AllReduce(ctx, H(b), H(b[:8]), 4, dtype.Float32, dtype.Sum) }, "recv buffer has 8 bytes, need 16"},
		{"negative count", func() error { return e.AllReduce(ctx, H(b), H(b), -1, dtype.Float32, dtype.Sum) }, "count -1"},
		{"bad dtype", func() error { return e.AllReduce(ctx, H(b), H(b), 1, dtype.DType(99), dtype.Sum) }, "unknown dtype"},
		{"bad op", func() error { return e.AllReduce(ctx, H(b), H(b), 1, dtype.Float32, dtype.Op(99)) }, "unknown op"},
		{"bad root", func() error { return e.Broadcast(ctx, H(b), H(b), 1, dtype.Float32, 2) }, "root 2 outside"},
		{"overlap", func() error { return e.AllReduce(ctx, H(b[:16]), H(b[8:24]), 4, dtype.Float32, dtype.Sum) }, "overlap"},
		{"allgather overlap", func() error { return e.AllGather(ctx, H(b[4:12]), H(b[:16]), 2, dtype.Float32) }, "overlaps"},
		{"nil send", func() error { return e.AllToAll(ctx, nil, H(b), 1, dtype.Float32) }, "send buffer is nil"},
		{"short send", func() error { return e.ReduceScatter(ctx, H(b[:8]), H(b[32:]), 2, dtype.Float32, dtype.Sum) }, "send buffer has 8 bytes"},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rank 0") {
			t.Errorf("%s: error %v, want one naming rank 0 and %q", tc.name, err, tc.want)
		}
		if errors.Is(err, errs.ErrMismatch) {
			t.Errorf("%s: an argument error must not look like a mismatch: %v", tc.name, err)
		}
	}
	if e.Seq() != 0 {
		t.Fatalf("invalid calls were numbered: Seq %d", e.Seq())
	}
	// The engine still works: a real call on both ranks.
	results := w.run(t, noSilent, func(ctx context.Context, r int, e *collectives.Engine) error { return e.Barrier(ctx) })
	if results[0] != nil || results[1] != nil || e.Seq() != 1 {
		t.Fatalf("barrier after invalid calls: %v, Seq %d", results, e.Seq())
	}
}

// TestLinkPeersNonHost checks the host adapter refuses other buffers.
type devBuf struct{ n int }

func (d devBuf) Len() int                            { return d.n }
func (d devBuf) Slice(off, n int) collectives.Buffer { return devBuf{n} }

func TestLinkPeersNonHost(t *testing.T) {
	p := collectives.NewLinkPeers(0, 2, worldtest.FakeMesh(2, fake.Options{}).Links[0])
	for _, r := range []interface{ Err() error }{p.Send(1, [4]uint64{}, devBuf{4}), p.Recv(1, [4]uint64{}, devBuf{4}), p.Send(0, [4]uint64{}, collectives.HostBuffer{})} {
		if err := r.Err(); err == nil {
			t.Fatalf("transfer accepted: want an error")
		}
	}
	if err := p.Send(1, [4]uint64{}, devBuf{4}).Err(); !errors.Is(err, errs.ErrNotSupported) {
		t.Fatalf("device buffer: %v, want ErrNotSupported", err)
	}
}
