package plane

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/flog"
)

// callLog writes the GPU planes' per-call lines, like NCCL's INFO lines
// with NCCL_DEBUG_SUBSYS=COLL (P2P for groups): one as a call is
// enqueued, naming the plane, and at TRACE one more after it, with the
// host time the enqueue took and the share each link kind carried.
type callLog struct {
	coll, p2p hclog.Logger // nil when that subsystem is off at INFO
	seq       uint64       // calls logged (NCCL's opCount); under the call queue
}

func newCallLog(lg hclog.Logger) callLog {
	var l callLog
	if flog.Enabled(lg, flog.Coll, hclog.Info) {
		l.coll = flog.Sub(lg, flog.Coll)
	}
	if flog.Enabled(lg, flog.P2P, hclog.Info) {
		l.p2p = flog.Sub(lg, flog.P2P)
	}
	return l
}

// do runs o on the plane, with its lines when they are on.
func (d *DeviceComm) do(ctx context.Context, o *Op, s *gpu.Stream) error {
	lg := d.log.coll
	if o.Kind == Group {
		lg = d.log.p2p
	}
	if lg == nil {
		return d.plane.Do(ctx, o, s)
	}
	d.log.seq++
	args := d.callArgs(o)
	lg.Info("gpu "+o.Kind.String(), args...)
	start := time.Now()
	err := d.plane.Do(ctx, o, s)
	if lg.IsTrace() {
		args = append(args, "enqueue_us", float64(time.Since(start).Nanoseconds())/1e3, "shares", sharesText(d.plane.LinkShares()))
		if err != nil {
			args = append(args, "error", err)
		}
		lg.Trace("gpu "+o.Kind.String()+" done", args...)
	}
	return err
}

func (d *DeviceComm) callArgs(o *Op) []any {
	args := []any{"comm", d.c.Name(), "opCount", d.log.seq}
	if o.Kind == Group {
		args = append(args, "transfers", len(o.P2P))
	} else {
		args = append(args, "count", o.Count, "datatype", o.DT.String())
		switch o.Kind {
		case AllReduce, ReduceScatter, Reduce:
			args = append(args, "op", o.Op.String())
		}
		switch o.Kind {
		case Broadcast, Reduce:
			args = append(args, "root", o.Root)
		}
	}
	return append(args, "nranks", d.c.Size(), "plane", d.path, "gpu", d.dev.String())
}

// sharesText writes link shares as "nvlink:0.920/pcie:0.080" ("none"
// when the call pushed nothing).
func sharesText(m map[string]float64) string {
	return flog.Tally(m, func(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) })
}
