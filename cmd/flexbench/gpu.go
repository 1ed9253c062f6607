package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/rank"
)

// flexbench --device gpu: one rank per GPU (FLEXLINK_GPU, else the local
// rank modulo the visible GPUs), buffers in device memory, and the same
// sizes, columns and #wrong checks as the cpu path. --backend picks what is
// measured: flexlink (its DeviceComm), nccl (libnccl.so.2 in the same
// processes), or both, which prints each size twice and the ratio of their
// bus bandwidths. libcuda and libnccl load at run time, so this file builds
// and the cpu path runs on machines without them.

// gpuOptions are the command-line choices runGPU needs beyond config.
type gpuOptions struct {
	backend string // flexlink, nccl or both
	json    bool
}

func runGPU(ctx context.Context, cfg config, opt gpuOptions) error {
	var names []string
	switch opt.backend {
	case "flexlink", "nccl":
		names = []string{opt.backend}
	case "both":
		names = []string{"flexlink", "nccl"}
	default:
		return fmt.Errorf("--device gpu --backend %s: want flexlink, nccl or both", opt.backend)
	}
	c, err := rank.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if cfg.root >= c.Size() {
		return fmt.Errorf("root %d out of range for %d ranks", cfg.root, c.Size())
	}
	g, err := openRig(c, cfg)
	if err != nil {
		c.Abort(err)
		return err
	}
	defer g.free()
	var colls []gpuColl
	defer func() {
		for _, co := range colls {
			co.close(ctx)
		}
	}()
	for _, name := range names {
		var co gpuColl
		if name == "nccl" {
			co, err = openNCCL(ctx, c, g.dev)
		} else {
			var dc *rank.DeviceComm
			before, _, _ := g.dev.MemInfo()
			if dc, err = c.Device(ctx, g.dev); err == nil {
				co = flexColl{dc}
				after, _, _ := g.dev.MemInfo()
				g.planeMem = int64(before) - int64(after)
			}
		}
		if err != nil {
			c.Abort(err)
			return fmt.Errorf("open %s on %s: %w", name, g.dev, err)
		}
		colls = append(colls, co)
	}
	me := c.Rank()
	w := io.Writer(os.Stdout)
	if me != 0 {
		w = io.Discard
	}
	if !opt.json {
		ncclTestsHeader(w, cfg)
		fmt.Fprintf(w, "# flexbench %s on gpu: nranks %d, iters %d, warmup %d, check %v\n", cfg.spec.name, c.Size(), cfg.iters, cfg.warm, cfg.check)
		for _, co := range colls {
			fmt.Fprintf(w, "#  backend %s\n", co.name())
		}
		fmt.Fprintf(w, "#  rank %2d on %s %s\n", me, c.Host(), g.dev)
		if g.planeMem != 0 {
			fmt.Fprintf(w, "#  gpu memory: the flexlink communicator took %.1f MiB of device memory at setup (buffers: 2 x %.1f MiB)\n",
				float64(g.planeMem)/(1<<20), float64(g.a.Len())/(1<<20))
		}
		fmt.Fprintf(w, "#%65s%41s\n", "out-of-place", "in-place")
		fmt.Fprintf(w, "#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s  %s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "backend")
	}
	all := map[string][]result{}
	var wrong int64
	for _, s := range sizes(cfg) {
		var rows []result
		for _, co := range colls {
			row, err := measureGPU(ctx, g, co, cfg, s)
			if err != nil {
				return fmt.Errorf("%s %s at %d bytes: %w", co.name(), cfg.spec.name, s, err)
			}
			rows = append(rows, row)
			all[co.name()] = append(all[co.name()], row)
			wrong += row.OutErr + row.InErr
			if !opt.json {
				fmt.Fprintf(w, "%s  %s\n", row, co.name())
				printShares(w, co, row.Bytes)
			}
		}
		if len(rows) == 2 && !opt.json && rows[1].OutBus > 0 {
			fmt.Fprintf(w, "#%11d  ratio %s/%s busbw: out-of-place %.3f", rows[0].Bytes, colls[0].name(), colls[1].name(), rows[0].OutBus/rows[1].OutBus)
			if rows[1].InBus > 0 {
				fmt.Fprintf(w, ", in-place %.3f", rows[0].InBus/rows[1].InBus)
			}
			fmt.Fprintln(w)
		}
	}
	if opt.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(all)
	} else {
		fmt.Fprintf(w, "# Out of bounds values : %d %s\n", wrong, map[bool]string{true: "OK", false: "FAILED"}[wrong == 0])
	}
	// FLEXLINK_PXN counters (pxn.go): the staged plane's all-to-alls go
	// through the host communicator's proxy.
	if err := pxnFooter(ctx, flexBackend{c}, &printer{w: w, on: me == 0, json: opt.json}); err != nil {
		return err
	}
	for _, co := range colls {
		if err := g.s.Synchronize(); err != nil {
			return err
		}
		if err := co.close(ctx); err != nil {
			return fmt.Errorf("close %s: %w", co.name(), err)
		}
	}
	colls = nil
	if wrong > 0 {
		return fmt.Errorf("%d wrong elements", wrong)
	}
	return nil
}

// printShares writes, after a flexlink row, how its last call's pushes
// were divided among the links (DeviceComm.LinkShares, this rank's view):
// "#   67108864  shares nvlink=0.920 pcie=0.080" (and " net=0.000" when
// FLEXLINK_LINKS names net).
func printShares(w io.Writer, co gpuColl, bytes int64) {
	f, ok := co.(flexColl)
	if !ok {
		return
	}
	ls := f.dc.LinkShares()
	if len(ls) == 0 {
		return
	}
	net := ""
	if f, ok := ls["net"]; ok { // FLEXLINK_LINKS=nvlink,pcie,net
		net = fmt.Sprintf(" net=%.3f", f)
	}
	fmt.Fprintf(w, "#%11d  shares nvlink=%.3f pcie=%.3f%s\n", bytes, ls["nvlink"], ls["pcie"], net)
}

// openRig opens this rank's GPU, a stream and buffers for the largest size.
func openRig(c *rank.Comm, cfg config) (*gpuRig, error) {
	drv, err := gpu.Open()
	if err != nil {
		return nil, err
	}
	env := settings.OS()
	// FLEXLINK_GPU is the launcher's pick; -1 means it found no GPU (no
	// NVML where it ran), so fall back on the local rank.
	ord := c.LocalRank() % drv.DeviceCount()
	if env.IsSet("FLEXLINK_GPU") {
		g, err := env.Int("FLEXLINK_GPU")
		if err != nil {
			drv.Close()
			return nil, err
		}
		if g >= 0 {
			ord = g
		}
	}
	dev, err := drv.Device(ord)
	if err != nil {
		drv.Close()
		return nil, err
	}
	g := &gpuRig{c: c, drv: drv, dev: dev}
	if g.s, err = dev.NewStream(); err != nil {
		g.free()
		return nil, err
	}
	// The largest buffer any size needs: n blocks for allgather/alltoall
	// receive, rounded like the sizes themselves.
	n := c.Size()
	bytes := int(cfg.maxB) + n*cfg.dt.Size()*256
	if g.a, err = dev.Alloc(bytes); err != nil {
		g.free()
		return nil, err
	}
	if g.b, err = dev.Alloc(bytes); err != nil {
		g.free()
		return nil, err
	}
	return g, nil
}

func (g *gpuRig) free() {
	for _, b := range []*gpu.Buffer{g.a, g.b} {
		if b != nil {
			b.Free()
		}
	}
	if g.s != nil {
		g.s.Close()
	}
	g.drv.Close()
}
