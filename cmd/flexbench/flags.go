package main

import (
	"fmt"
	"math"

	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/settings"
)

// usageError is a command-line mistake, found before any rank opens a
// communicator; under flexrun only rank 0 prints it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// launchedRank is this process's rank as flexrun set it (FLEXLINK_RANK),
// or 0 when it is not set or not a number.
func launchedRank() int {
	r, err := settings.OS().Int("FLEXLINK_RANK")
	if err != nil {
		return 0
	}
	return r
}

// configFromFlags reads and checks the command line of collective name.
func configFromFlags(cc *cli.Context, name string) (config, error) {
	if cc.NArg() != 0 {
		return config{}, fmt.Errorf("unexpected arguments %v", cc.Args().Slice())
	}
	spec, err := lookupOp(name)
	if err != nil {
		return config{}, err
	}
	cfg := config{spec: spec, sweep: sweep{factor: cc.Float64("stepfactor")}, root: cc.Int("root"),
		timing: timing{iters: cc.Int("iters"), warm: cc.Int("warmup_iters")}, check: cc.Int("check") != 0,
		inPlaceAlso: !cc.Bool("no-inplace")}
	if cfg.minB, err = parseSize(cc.String("minbytes")); err != nil {
		return cfg, fmt.Errorf("-b: %w", err)
	}
	if cfg.maxB, err = parseSize(cc.String("maxbytes")); err != nil {
		return cfg, fmt.Errorf("-e: %w", err)
	}
	if cfg.step, err = parseSize(cc.String("stepbytes")); err != nil {
		return cfg, fmt.Errorf("-i: %w", err)
	}
	if cfg.dt, err = dtype.ParseDType(cc.String("datatype")); err != nil {
		return cfg, err
	}
	if cfg.op, err = dtype.ParseOp(cc.String("op")); err != nil {
		return cfg, err
	}
	if cc.Int("check") != 0 && cc.Int("check") != 1 {
		return cfg, fmt.Errorf("-c %d: want 0 or 1", cc.Int("check"))
	}
	if err := ncclTestsConfig(cc, &cfg); err != nil {
		return cfg, err
	}
	if !cc.IsSet("stepfactor") && cfg.step > 0 {
		cfg.factor = 1 // -i alone: grow by -i, as nccl-tests does
	}
	switch d := cc.String("device"); d {
	case "gpu":
		if cfg.avg != avgMax || cfg.agg != 1 {
			return cfg, fmt.Errorf("-a %d -m %d: --device gpu reports the slowest rank's time of single operations; drop -a and -m", cfg.avg, cfg.agg)
		}
	case "cpu":
	default:
		return cfg, fmt.Errorf("--device %s: want cpu or gpu", d)
	}
	return cfg, checkFlags(cfg)
}

// checkFlags refuses a command line that would measure nothing or
// something other than asked, before any rank opens a communicator: every
// rank checks the same flags, so all of them stop with the same message.
// The root's upper bound needs the number of ranks and is checked once
// the communicator is open.
func checkFlags(cfg config) error {
	switch {
	case cfg.minB > cfg.maxB:
		return fmt.Errorf("-b %d is larger than -e %d: no size to measure", cfg.minB, cfg.maxB)
	case math.IsNaN(cfg.factor) || cfg.factor < 1:
		return fmt.Errorf("-f %g: want a step factor of 1 or more", cfg.factor)
	case cfg.factor == 1 && cfg.step <= 0:
		return fmt.Errorf("-f 1 with -i %d: the size would never grow; give -f above 1 or -i above 0", cfg.step)
	case cfg.root < 0:
		return fmt.Errorf("-r %d: want a root rank of 0 or more", cfg.root)
	case cfg.iters < 1:
		return fmt.Errorf("-n %d: want 1 or more timed iterations", cfg.iters)
	case cfg.warm < 0:
		return fmt.Errorf("-w %d: want 0 or more warm-up iterations", cfg.warm)
	}
	return nil
}
