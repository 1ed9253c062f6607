// Command flexbench measures flexlink collectives the way nccl-tests does,
// with the same columns and bus-bandwidth formulas, so figures compare
// directly:
//
//	flexrun -np 4 flexbench allreduce -b 8 -e 256M -f 2 -d float -o sum -n 20 -w 5 -c 1
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/rank"
)

func main() {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "minbytes", Aliases: []string{"b"}, Value: "32M", Usage: "smallest size (K, M, G suffixes)"},
		&cli.StringFlag{Name: "maxbytes", Aliases: []string{"e"}, Value: "32M", Usage: "largest size"},
		&cli.Float64Flag{Name: "stepfactor", Aliases: []string{"f"}, Value: 2, Usage: "multiply the size by this each step"},
		&cli.StringFlag{Name: "stepbytes", Aliases: []string{"i"}, Value: "0", Usage: "add this to the size each step (when -f is 1)"},
		&cli.StringFlag{Name: "datatype", Aliases: []string{"d"}, Value: "float", Usage: "int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double f8e4m3 f8e5m2"},
		&cli.StringFlag{Name: "op", Aliases: []string{"o"}, Value: "sum", Usage: "sum prod min max avg"},
		&cli.IntFlag{Name: "root", Aliases: []string{"r"}, Value: 0, Usage: "root of broadcast and reduce"},
		&cli.IntFlag{Name: "iters", Aliases: []string{"n"}, Value: 20, Usage: "timed iterations per size"},
		&cli.IntFlag{Name: "warmup_iters", Aliases: []string{"w"}, Value: 5, Usage: "untimed iterations per size"},
		&cli.IntFlag{Name: "check", Aliases: []string{"c"}, Value: 1, Usage: "1: check every result against a float64 reference (#wrong)"},
		&cli.BoolFlag{Name: "no-inplace", Usage: "skip the in-place measurement"},
		&cli.BoolFlag{Name: "csv", Usage: "print CSV instead of the table"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of the table"},
		&cli.StringFlag{Name: "plot", Usage: "draw busbw against size into FILE.svg or FILE.png"},
		&cli.StringFlag{Name: "backend", Value: "flexlink", Usage: "flexlink; with --device gpu also nccl or both (prints both and their ratio); mpi in the build with -tags mpi (run it under mpirun)"},
		&cli.StringFlag{Name: "device", Value: "cpu", Usage: "where buffers live: cpu, or gpu (one GPU per rank: FLEXLINK_GPU, else the local rank)"},
	}
	flags = append(flags, ncclTestsFlags()...)
	// One subcommand per collective, all with the same flags, so that
	// "flexbench allreduce -b 8 -e 256M" reads like nccl-tests' all_reduce_perf.
	var cmds []*cli.Command
	for _, name := range strings.Split(opNames(), ", ") {
		name := name
		cmds = append(cmds, &cli.Command{
			Name:   name,
			Usage:  "measure " + name,
			Flags:  flags,
			Action: func(cc *cli.Context) error { return run(cc, name) },
			// A bad flag is one line (no usage dump); --help shows usage.
			OnUsageError: func(_ *cli.Context, err error, _ bool) error {
				return usageError{fmt.Errorf("%w (see flexbench %s --help)", err, name)}
			},
		})
	}
	// Under flexrun every rank parses the same command line: only rank 0
	// prints help and command-line errors, so each shows once.
	quiet := launchedRank() > 0
	help := io.Writer(os.Stdout)
	if quiet {
		help = io.Discard
	}
	app := &cli.App{
		Writer:          help,
		Name:            "flexbench",
		Usage:           "benchmark flexlink collectives (nccl-tests compatible output)",
		UsageText:       "flexbench COLLECTIVE [flags]   (COLLECTIVE: " + opNames() + ")",
		HideHelpCommand: true,
		Commands:        cmds,
		CommandNotFound: func(cc *cli.Context, name string) {
			if _, err := lookupOp(name); !quiet {
				fmt.Fprintln(os.Stderr, "flexbench:", err)
			}
			os.Exit(2)
		},
	}
	if err := app.Run(os.Args); err != nil {
		var ue usageError
		if !quiet || !errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "flexbench:", err)
		}
		os.Exit(rank.ExitCode(err))
	}
}

func run(cc *cli.Context, name string) error {
	cfg, err := configFromFlags(cc, name)
	if err != nil {
		return usageError{err}
	}
	ctx := context.Background()
	if cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}
	switch d := cc.String("device"); d {
	case "gpu":
		return runGPU(ctx, cfg, gpuOptions{backend: cc.String("backend"), json: cc.Bool("json")})
	}
	c, err := openBackend(ctx, cc.String("backend"))
	if err != nil {
		return err
	}
	if cfg.root < 0 || cfg.root >= c.size() {
		c.close()
		return fmt.Errorf("root %d out of range for %d ranks", cfg.root, c.size())
	}
	out := newPrinter(os.Stdout, c.rank() == 0, cc.Bool("csv"), cc.Bool("json"))
	out.header(cfg, c)
	var rows []result
	var wrong int64
	for _, s := range sizes(cfg) {
		row, err := measure(ctx, c, cfg, s)
		if err != nil {
			if cfg.timeout > 0 && ctx.Err() != nil {
				return fmt.Errorf("%s at %d bytes: -T %v passed: %w", cfg.spec.name, s, cfg.timeout, err)
			}
			return fmt.Errorf("%s at %d bytes: %w", cfg.spec.name, s, err)
		}
		rows = append(rows, row)
		wrong += row.OutErr + row.InErr
		out.row(row)
	}
	out.footer(rows)
	if err := pxnFooter(ctx, c, out); err != nil { // FLEXLINK_PXN counters (pxn.go)
		return err
	}
	if p := cc.String("plot"); p != "" && c.rank() == 0 {
		if err := plotBusBW(p, c.name()+" "+cfg.spec.name, c.size(), rows); err != nil {
			return err
		}
	}
	if err := c.close(); err != nil {
		return err
	}
	if wrong > 0 {
		return fmt.Errorf("%d wrong elements", wrong)
	}
	return nil
}

// parseSize reads 8, 64K, 256M, 1G (powers of 1024).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	for suf, m := range map[string]int64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30} {
		if strings.HasSuffix(s, suf) {
			mult, s = m, strings.TrimSuffix(s, suf)
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q: want bytes like 8, 64K, 256M or 1G", s)
	}
	return v * mult, nil
}
