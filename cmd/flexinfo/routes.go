package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/proxy/pxn"
)

// maxNodes bounds --nodes: the plan has one route per cross-host pair of
// ranks, so it grows with the square of the job.
const maxNodes = 128

// routesCommand is `flexinfo routes`: the PXN route plan of a job of N
// copies of one host (docs/PXN.md).
func routesCommand(out io.Writer, env settings.Env) *cli.Command {
	return &cli.Command{
		Name:  "routes",
		Usage: "print the PXN (rail-aligned) route of every cross-host rank pair for N copies of a host",
		Description: "Hosts are named host0..hostN-1; rank = host * ranks-per-node + local index, one rank per GPU\n" +
			"(GPU i is local rank i). With --json, one route object per line (JSON Lines):\n" +
			`{"src":0,"dst":9,"via":1,"nic":"mlx5_1","rail":1,"dst_rail":1,"hop":"nvlink","reason":"..."}` + "\n" +
			"(with --groups, one multi-receive group per line instead; with --rings, one ring of the ring\n" +
			"collectives per line). Without --json, a table of routes, the aggregation summary and the rings.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "topo-file", Required: true, Usage: "topology of one host (flexlink JSON/YAML, or NCCL XML); FLEXLINK_RAILS applies"},
			&cli.IntFlag{Name: "nodes", Required: true, Usage: fmt.Sprintf("number of hosts, 2 to %d", maxNodes)},
			&cli.StringFlag{Name: "level", Value: fmt.Sprint(int(pxn.DefaultLevel)), Usage: "PXN level: 0 off, 1 only for GPUs without a near NIC, 2 rail-aligned (FLEXLINK_PXN)"},
			&cli.BoolFlag{Name: "host-buffers", Usage: "plan for host memory (relays over shm to any local rank) instead of GPU memory (relays over NVLink only); implied for hosts without GPUs"},
			&cli.IntFlag{Name: "ranks-per-node", Usage: "ranks per host (default: one per GPU; required for a host without GPUs)"},
			&cli.IntFlag{Name: "max-recvs", Value: pxn.MaxRecvs, Usage: "buffers per multi-receive"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON Lines: one route (or, with --groups, one group) per line"},
			&cli.BoolFlag{Name: "groups", Usage: "with --json: print the multi-receive groups instead of the routes"},
			&cli.BoolFlag{Name: "rings", Usage: "with --json: print the rings of the ring collectives (one per rail, pxn.Rings) instead of the routes"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("routes: unexpected argument %q", c.Args().First())
			}
			p, h, w, err := planRoutes(c, env)
			if err != nil {
				return err
			}
			agg := p.Aggregate(c.Int("max-recvs"))
			rings := ringsOf(w)
			switch {
			case c.Bool("json") && c.Bool("rings"):
				return writeJSONLines(out, rings)
			case c.Bool("json") && c.Bool("groups"):
				return writeJSONLines(out, agg.Groups)
			case c.Bool("json"):
				return writeJSONLines(out, p.Routes)
			}
			if err := writeRoutesTable(out, h, c.Int("nodes"), p, agg); err != nil {
				return err
			}
			return writeRingsTable(out, rings)
		},
	}
}

// planRoutes builds the world the flags describe and plans it.
func planRoutes(c *cli.Context, env settings.Env) (*pxn.Plan, *topo.Host, *topo.World, error) {
	nodes := c.Int("nodes")
	if nodes < 2 || nodes > maxNodes {
		return nil, nil, nil, fmt.Errorf("routes: --nodes %d: want 2 to %d hosts (routes join ranks on different hosts)", nodes, maxNodes)
	}
	level, err := pxn.ParseLevel(c.String("level"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("routes: --level: %w", err)
	}
	if c.Int("max-recvs") < 1 {
		return nil, nil, nil, fmt.Errorf("routes: --max-recvs %d: want at least 1", c.Int("max-recvs"))
	}
	h, err := load(c.String("topo-file"), "", env)
	if err != nil {
		return nil, nil, nil, err
	}
	members, err := routeMembers(h, nodes, c.Int("ranks-per-node"))
	if err != nil {
		return nil, nil, nil, err
	}
	w, err := topo.NewWorld(members)
	if err != nil {
		return nil, nil, nil, err
	}
	opt := pxn.Options{Level: level, Mem: pxn.GPUMem}
	if c.Bool("host-buffers") || len(h.GPUs) == 0 {
		opt.Mem = pxn.HostMem
	}
	p, err := pxn.Compute(w, opt)
	return p, h, w, err
}

// ringLine is one ring of the ring collectives as --json --rings prints it.
type ringLine struct {
	Ring  int           `json:"ring"`
	Ranks []int         `json:"ranks"`
	Hops  []pxn.RingHop `json:"hops"`
}

// ringsOf is the rings a communicator of w's ranks runs its ring
// collectives on with PXN set (pxn.Rings), with their cross-host hops.
func ringsOf(w *topo.World) []ringLine {
	var out []ringLine
	for c, ring := range pxn.Rings(w) {
		out = append(out, ringLine{Ring: c, Ranks: ring, Hops: pxn.RingHops(w, ring)})
	}
	return out
}

func writeRingsTable(out io.Writer, rings []ringLine) error {
	fmt.Fprintf(out, "\nring collectives with PXN set (allreduce, reduce-scatter, allgather; one ring per rail, FLEXLINK_RINGS):\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RING\tRANKS\tCROSS-HOST HOPS (src>dst rail[>dst rail])")
	for _, r := range rings {
		hops := make([]string, len(r.Hops))
		for i, h := range r.Hops {
			hops[i] = fmt.Sprintf("%d>%d %s", h.Src, h.Dst, numOr(h.Rail, "-"))
			if !h.Aligned {
				hops[i] += ">" + numOr(h.DstRail, "-")
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.Ring, intList(r.Ranks), strings.Join(hops, ", "))
	}
	return tw.Flush()
}

// routeMembers places ranks on nodes copies of h named host0.., host by
// host: local rank i drives GPU i (h.GPUs[i]), or no GPU on a host
// without GPUs.
func routeMembers(h *topo.Host, nodes, perNode int) ([]topo.Member, error) {
	switch {
	case perNode < 0:
		return nil, fmt.Errorf("routes: --ranks-per-node %d: want at least 1", perNode)
	case perNode == 0 && len(h.GPUs) == 0:
		return nil, fmt.Errorf("routes: host %s has no GPUs: give --ranks-per-node", h.Hostname)
	case perNode == 0:
		perNode = len(h.GPUs)
	case len(h.GPUs) > 0 && perNode > len(h.GPUs):
		return nil, fmt.Errorf("routes: --ranks-per-node %d: host %s has %d GPUs (one rank per GPU)", perNode, h.Hostname, len(h.GPUs))
	}
	var m []topo.Member
	for n := range nodes {
		c := *h
		c.Hostname = fmt.Sprintf("host%d", n)
		for i := range perNode {
			gpu := -1
			if len(h.GPUs) > 0 {
				gpu = h.GPUs[i].Index
			}
			m = append(m, topo.Member{Host: &c, GPU: gpu})
		}
	}
	return m, nil
}

func writeJSONLines[T any](out io.Writer, items []T) error {
	enc := json.NewEncoder(out)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}

func writeRoutesTable(out io.Writer, h *topo.Host, nodes int, p *pxn.Plan, a pxn.Aggregation) error {
	fmt.Fprintf(out, "PXN routes: %d x %s (%s), %d ranks, level %d (%s), %s buffers\n\n",
		nodes, h.Hostname, h.Source, len(p.Hosts), int(p.Level), p.Level, p.Mem)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SRC\tDST\tVIA\tHOP\tNIC\tRAIL\tDST RAIL\tREASON")
	for _, r := range p.Routes {
		hop := r.Hop
		if hop == "" {
			hop = "-"
		}
		fmt.Fprintf(tw, "%s:%d\t%s:%d\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Hosts[r.Src], r.Src, p.Hosts[r.Dst], r.Dst,
			r.Via, hop, orDash(r.NIC), numOr(r.Rail, "-"), numOr(r.DstRail, "-"), r.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nmulti-receive groups (one connection from VIA's NIC into DST; up to %d buffers per receive):\n", a.MaxRecvs)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VIA\tDST\tNIC\tRAIL\tRECEIVES\tSENDERS")
	for _, g := range a.Groups {
		fmt.Fprintf(tw, "%d\t%s:%d\t%s\t%s\t%d\t%s\n", g.Via, g.DstHost, g.Dst, orDash(g.NIC), numOr(g.Rail, "-"), g.Receives, intList(g.Senders))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	per := 0.0
	if a.Receives > 0 {
		per = float64(a.Messages) / float64(a.Receives)
	}
	_, err := fmt.Fprintf(out, "\nall-to-all: %d cross-host messages, %d relayed, %d cross-rail; %d receives (%.2f messages per receive)\n",
		a.Messages, a.Relayed, a.CrossRail, a.Receives, per)
	return err
}

func intList(v []int) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(x)
	}
	return s
}
