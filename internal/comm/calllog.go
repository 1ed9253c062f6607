package comm

import (
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/internal/flog"
)

// callObserver is the engine's observer that writes NCCL's per-call
// lines: one INFO line as each collective starts when COLL is selected
// (P2P for send/recv groups), and at TRACE one more as it ends, with the
// time it took. It returns nil when neither subsystem is on at INFO, so
// the engine does nothing per call.
func (c *Comm) callObserver() collectives.Observer {
	lg := c.world.log
	coll := flog.Enabled(lg, flog.Coll, hclog.Info)
	p2p := flog.Enabled(lg, flog.P2P, hclog.Info)
	if !coll && !p2p {
		return nil
	}
	collLog, p2pLog := flog.Sub(lg, flog.Coll), flog.Sub(lg, flog.P2P)
	return func(ci collectives.Call) {
		out, on := collLog, coll
		if ci.Op == collectives.OpSendRecv {
			out, on = p2pLog, p2p
		}
		if !on || (ci.End && !out.IsTrace()) {
			return
		}
		c.writeCall(out, ci)
	}
}

// writeCall writes one line for ci (called only when the line is on).
func (c *Comm) writeCall(lg hclog.Logger, ci collectives.Call) {
	args := []any{"comm", c.name}
	if ci.Op != collectives.OpSendRecv { // groups are numbered per pair, not per call
		args = append(args, "opCount", ci.Seq, "count", ci.Count)
	}
	if ci.HasDType {
		args = append(args, "datatype", ci.DType.String(), "bytes", ci.Count*int64(ci.DType.Size()))
	}
	if ci.HasRedOp {
		args = append(args, "op", ci.RedOp.String())
	}
	if ci.Root >= 0 {
		args = append(args, "root", ci.Root)
	}
	if ci.Peers > 0 {
		args = append(args, "transfers", ci.Peers)
	}
	args = append(args, "nranks", ci.Ranks, "algo", ci.Algo, "links", linkSummary(c.links.report()))
	if ci.End {
		args = append(args, "elapsed_us", float64(ci.Elapsed.Nanoseconds())/1e3)
		if ci.Err != nil {
			args = append(args, "error", ci.Err)
		}
		lg.Trace(ci.Op+" done", args...)
		return
	}
	lg.Info(ci.Op, args...)
}

// linkSummary counts the open links by kind: "shm:3/tcp:1" ("none" before
// the first message has opened any; links open lazily).
func linkSummary(links []LinkReport) string {
	n := map[string]int{}
	for _, l := range links {
		n[l.Kind]++
	}
	return flog.Tally(n, strconv.Itoa)
}

// sharesLogger is the multilink channel's OnShares toward world rank
// wpeer over links of kinds: one INFO line (subsystem NET) each time the
// balancer's shares for a size class settle or move; nil when that line
// is off.
func (c *Comm) sharesLogger(wpeer int, kinds []string) func(int, []balance.Share) {
	lg := c.world.log
	if !flog.Enabled(lg, flog.Net, hclog.Info) {
		return nil
	}
	lg = flog.Sub(lg, flog.Net)
	return func(bytes int, shares []balance.Share) {
		var b strings.Builder
		for i, s := range shares {
			if i > 0 {
				b.WriteByte('/')
			}
			name := "link" + strconv.Itoa(s.Link)
			if s.Link >= 0 && s.Link < len(kinds) {
				name = kinds[s.Link]
			}
			b.WriteString(name + ":" + strconv.FormatFloat(s.Fraction, 'f', 3, 64))
		}
		lg.Info("balancer shares", "comm", c.name, "peer", wpeer, "peer_host", c.world.hosts[wpeer], "bytes", bytes, "shares", b.String())
	}
}
