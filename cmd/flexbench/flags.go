package main

import (
	"fmt"
	"math"
)

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
