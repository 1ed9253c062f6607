package direct

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
)

// Failures of the PCIe share on the fake driver: a copy that cannot be
// enqueued, a staging table that does not fit.

// TestGPUFakePCIeFault: a copy of the PCIe part that cannot be enqueued
// fails the call and aborts the job, with no rank left waiting. A D2H
// failure on a sender happens before its done message, so every rank's
// call fails. An H2D failure happens on a receiver after the last
// handshake: its call fails, the senders' calls have already completed
// (with their own data intact), and their next call fails.
func TestGPUFakePCIeFault(t *testing.T) {
	for _, where := range []string{"d2h", "h2d"} {
		for _, op := range []plane.Kind{plane.AllGather, plane.AllReduce, plane.AllToAll} {
			t.Run(where+"-"+op.String(), func(t *testing.T) {
				env := map[string]string{"FLEXLINK_PCIE_SHARE": "0.25", "FLEXLINK_GPU_CHUNK_BYTES": "65536"}
				rs := fakeRanks(t, 3, gpufake.Config{}, env, 3*fakeBig*8)
				rs[1].dc.Plane().(*directPlane).px().Fault = func(at string, peer int) error {
					if at == where {
						return errors.New("injected " + at + " failure")
					}
					return nil
				}
				ctx := testCtx(t, 20*time.Second)
				start := time.Now()
				failedAt := make([]int, len(rs))
				errs := onRanks(rs, func(r *devRank) error {
					_, err := runDevCase(ctx, r, devCase{kind: op, count: fakeBig, dt: dtype.Float32, op: dtype.Sum})
					if err != nil {
						failedAt[r.c.Rank()] = 1
						return err
					}
					failedAt[r.c.Rank()] = 2
					return r.dc.AllGather(ctx, r.a.Sub(0, 1024), r.b.Sub(0, 3*1024), 256, dtype.Float32, r.s)
				})
				for r, err := range errs {
					switch {
					case err == nil:
						t.Errorf("rank %d: no call failed", r)
					case errors.Is(err, context.DeadlineExceeded):
						t.Errorf("rank %d: timed out instead of failing: %v", r, err)
					case (where == "d2h" || r == 1) && failedAt[r] != 1:
						t.Errorf("rank %d: the faulty call succeeded", r)
					}
				}
				if !strings.Contains(fmt.Sprint(errs), "injected") {
					t.Errorf("no rank names the injected failure: %v", errs)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("failing took %v", d)
				}
			})
		}
	}
}

// TestGPUFakePCIeBadTable: a staging table that does not fit the
// receiver's buffer or staging is refused whole, before any copy.
func TestGPUFakePCIeBadTable(t *testing.T) {
	rs := fakeRanks(t, 2, gpufake.Config{}, map[string]string{"FLEXLINK_PCIE_STAGING_BYTES": "1048576"}, 1<<20)
	pl := rs[0].dc.Plane().(*directPlane)
	rx := pl.px().Rx(1)
	recv := rs[0].b.Sub(0, 1<<20)
	table := func(sb, n int, segs ...int) []byte {
		b := make([]byte, pcie.TableBytes)
		le := binary.LittleEndian
		le.PutUint64(b[8:], uint64(sb))
		le.PutUint64(b[16:], uint64(n))
		for i, v := range segs {
			le.PutUint64(b[pcie.TableHeader+8*i:], uint64(v))
		}
		return b
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		ok   bool
	}{
		{"fits", table(65536, 2, 0, 4096, 8192, 65536), true},
		{"too many entries", table(65536, pcieMaxSegs+1), false},
		{"zero slot", table(0, 1, 0, 4096), false},
		{"past recv", table(65536, 1, 1<<20-4096, 8192), false},
		{"negative offset", table(65536, 1, -4096, 8192), false},
		{"empty piece", table(65536, 1, 0, 0), false},
		{"past staging", table(1<<19, 2, 0, 1<<19, 0, 1<<19+4096), false},
		{"too many slots", table(4096, 1, 0, 17*4096), false},
	} {
		_, _, err := pl.px().ParseTable(1, tc.msg, rx, recv)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, errs.ErrMismatch) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
