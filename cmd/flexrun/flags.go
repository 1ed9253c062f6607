package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/launcher"
)

// durationValue is a duration flag's value: a Go duration of zero or
// more, or a plain number of seconds as mpirun's --timeout takes it
// ("--timeout 2" is 2s, "0.5" is 500ms). A negative one is refused.
type durationValue struct{ d time.Duration }

func (v *durationValue) Set(s string) error {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return errors.New("want seconds (2, 0.5) or a duration like 90s, 1m30s or 500ms")
		}
		d, err = time.Duration(secs*float64(time.Second)), nil
	}
	if d < 0 {
		return errors.New("want a duration of 0 or more")
	}
	v.d = d
	return nil
}

func (v *durationValue) String() string {
	if v == nil {
		return ""
	}
	return v.d.String()
}

// durationFlag declares a duration flag with its default; defaultText,
// when set, replaces the default in the help.
func durationFlag(name string, def time.Duration, usage, defaultText string) cli.Flag {
	return &cli.GenericFlag{Name: name, Value: &durationValue{d: def}, Usage: usage, DefaultText: defaultText}
}

// duration reads a flag declared by durationFlag.
func duration(c *cli.Context, name string) time.Duration {
	if v, ok := c.Generic(name).(*durationValue); ok {
		return v.d
	}
	return 0
}

// mappingFromFlags reads --map-by, -N, --bind-to and --output-filename
// into job.
func mappingFromFlags(c *cli.Context, job *launcher.Job) error {
	m, err := launcher.ParseMapping(c.String("map-by"))
	if err != nil {
		return err
	}
	job.MapBy, job.PerUnit = m.By, m.Unit
	switch {
	case job.PerNode < 0:
		return fmt.Errorf("-N %d: want 1 or more", job.PerNode)
	case m.PerUnit > 0 && job.PerNode > 0 && (m.PerUnit != job.PerNode || m.Unit != launcher.PerHost):
		return fmt.Errorf("-N %d and --map-by %s disagree: give one", job.PerNode, c.String("map-by"))
	case m.PerUnit > 0:
		job.PerNode = m.PerUnit
	}
	if job.BindTo, err = launcher.ParseBindTo(c.String("bind-to")); err != nil {
		return err
	}
	if dir := c.String("output-filename"); dir != "" {
		if job.OutputDir != "" {
			return errors.New("give either --output-dir or --output-filename, not both")
		}
		// OpenMPI 4.1 writes DIR/1/rank.N/stdout: "1" is the job's number.
		job.OutputDir = filepath.Join(dir, "1")
	}
	return nil
}
