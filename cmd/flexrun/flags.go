package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"flexlink/launcher"
)

// durationValue is a duration flag's value: a Go duration of zero or
// more. A bare number is refused with a hint (is "--timeout 2" seconds or
// minutes?), and so is a negative duration.
type durationValue struct{ d time.Duration }

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	switch {
	case err != nil:
		return errors.New("want a duration like 2s, 90s, 1m30s or 500ms")
	case d < 0:
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
	var perNode int
	var err error
	if job.MapBy, perNode, err = launcher.ParseMapping(c.String("map-by")); err != nil {
		return err
	}
	switch {
	case job.PerNode < 0:
		return fmt.Errorf("-N %d: want 1 or more", job.PerNode)
	case perNode > 0 && job.PerNode > 0 && perNode != job.PerNode:
		return fmt.Errorf("-N %d and --map-by %s disagree: give one", job.PerNode, c.String("map-by"))
	case perNode > 0:
		job.PerNode = perNode
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
