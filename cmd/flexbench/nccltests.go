package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/dtype"
)

// Time reported across ranks, nccl-tests' -a values.
const (
	avgRank0 = 0 // rank 0's time
	avgMean  = 1 // the mean over the ranks
	avgMin   = 2 // the fastest rank's
	avgMax   = 3 // the slowest rank's (flexbench's default)
)

// ncclTestsFlags are nccl-tests' flags that have no flexbench name: they
// are accepted with nccl-tests' meaning where it applies to flexlink, and
// refused with one line where it does not (see ncclTestsConfig).
func ncclTestsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "ngpus", Aliases: []string{"g"}, Value: 1, Usage: "GPUs per process: 1 (flexlink runs one rank per GPU; start more ranks instead)"},
		&cli.IntFlag{Name: "nthreads", Aliases: []string{"t"}, Value: 1, Usage: "threads per process: 1 (start more ranks instead)"},
		&cli.IntFlag{Name: "average", Aliases: []string{"a"}, Value: avgMax, Usage: "time reported: 0 rank 0's, 1 mean over ranks, 2 min, 3 max (nccl-tests' default is 1)"},
		&cli.IntFlag{Name: "agg_iters", Aliases: []string{"m"}, Value: 1, Usage: "operations per timed iteration"},
		&cli.IntFlag{Name: "cudagraph", Aliases: []string{"G"}, Value: 0, Usage: "0 (flexbench does not capture CUDA graphs)"},
		&cli.IntFlag{Name: "blocking", Aliases: []string{"z"}, Value: 0, Usage: "0 or 1: accepted; flexlink calls return when the operation is done either way"},
		&cli.IntFlag{Name: "timeout", Aliases: []string{"T"}, Value: 0, Usage: "seconds the whole run may take (0: none); exceeded: the run fails naming the size"},
		&cli.IntFlag{Name: "parallel_init", Aliases: []string{"p"}, Value: 0, Usage: "0 or 1: accepted; with one GPU per process there is nothing to initialise in parallel"},
	}
}

// ncclTestsConfig reads nccl-tests' flags into cfg, or says in one line
// why one cannot be honoured.
func ncclTestsConfig(cc *cli.Context, cfg *config) error {
	switch g, t, gr := cc.Int("ngpus"), cc.Int("nthreads"), cc.Int("cudagraph"); {
	case g != 1:
		return fmt.Errorf("-g %d: flexbench drives one GPU per process; start %d times as many ranks (flexrun -np) instead", g, g)
	case t != 1:
		return fmt.Errorf("-t %d: flexbench runs one thread per process; start %d times as many ranks (flexrun -np) instead", t, t)
	case gr != 0:
		return fmt.Errorf("-G %d: flexbench does not capture CUDA graphs; drop -G", gr)
	}
	for _, f := range []string{"blocking", "parallel_init"} {
		if v := cc.Int(f); v != 0 && v != 1 {
			return fmt.Errorf("-%s %d: want 0 or 1", map[string]string{"blocking": "z", "parallel_init": "p"}[f], v)
		}
	}
	cfg.avg, cfg.agg = cc.Int("average"), cc.Int("agg_iters")
	switch {
	case cfg.avg < avgRank0 || cfg.avg > avgMax:
		return fmt.Errorf("-a %d: want 0 (rank 0), 1 (mean), 2 (min) or 3 (max)", cfg.avg)
	case cfg.agg < 1:
		return fmt.Errorf("-m %d: want 1 or more operations per iteration", cfg.agg)
	case cc.Int("timeout") < 0:
		return fmt.Errorf("-T %d: want seconds, 0 or more", cc.Int("timeout"))
	}
	cfg.timeout = time.Duration(cc.Int("timeout")) * time.Second
	return nil
}

// agreedTime combines each rank's time per operation as -a asks.
func agreedTime(ctx context.Context, c backend, us float64, mode int) (float64, error) {
	switch mode {
	case avgRank0:
		if c.rank() != 0 {
			us = 0
		}
		return c.reduceF64(ctx, us, dtype.Sum)
	case avgMean:
		sum, err := c.reduceF64(ctx, us, dtype.Sum)
		return sum / float64(c.size()), err
	case avgMin:
		return c.reduceF64(ctx, us, dtype.Min)
	}
	return c.reduceF64(ctx, us, dtype.Max)
}

// ncclTestsHeader writes nccl-tests' first header line, which scripts
// that read nccl-tests logs look for.
func ncclTestsHeader(w io.Writer, cfg config) {
	step := fmt.Sprintf("%g(factor)", cfg.factor)
	if cfg.factor <= 1 {
		step = fmt.Sprintf("%d(bytes)", cfg.step)
	}
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d agg iters: %d validation: %d graph: 0\n",
		cfg.minB, cfg.maxB, step, cfg.warm, cfg.iters, max(cfg.agg, 1), map[bool]int{true: 1}[cfg.check])
	fmt.Fprintln(w, "#")
}

// ncclTestsFooter writes nccl-tests' two closing lines: the wrong values
// and the mean out-of-place bus bandwidth, printed as nccl-tests prints
// it (C's %g: six significant digits).
func ncclTestsFooter(w io.Writer, wrong int64, sumBus float64, rows int) {
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", wrong, map[bool]string{true: "OK", false: "FAILED"}[wrong == 0])
	if rows > 0 {
		fmt.Fprintf(w, "# Avg bus bandwidth    : %.6g \n", sumBus/float64(rows))
	}
	fmt.Fprintln(w, "#")
}
