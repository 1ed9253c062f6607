package main

import (
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/internal/textdist"

	"github.com/urfave/cli/v2"
)

// unknownFlag rewrites the parser's "flag provided but not defined: -x"
// to name the flag as it was typed in args (with its dashes) and the
// nearest known flag, when one is close. Other errors are returned as
// they are.
func unknownFlag(err error, args []string, known []cli.Flag) error {
	const pfx = "flag provided but not defined: -"
	msg := err.Error()
	i := strings.Index(msg, pfx)
	if i < 0 {
		return err
	}
	name := strings.Fields(msg[i+len(pfx):] + " ")[0]
	typed := "-" + name
	for _, a := range args {
		a, _, _ = strings.Cut(a, "=")
		if strings.TrimLeft(a, "-") == name && strings.HasPrefix(a, "-") {
			typed = a
			break
		}
	}
	out := fmt.Sprintf("unknown flag %s", typed)
	if near := nearestFlag(name, known); near != "" {
		out += fmt.Sprintf("; did you mean %s?", near)
	}
	return fmt.Errorf("%s (see flexrun --help)", out)
}

// nearestFlag is the known flag name (with its dashes) closest to name by
// edit distance, when it is within a third of the longer name's length
// (at least 2); "" when none is that close.
func nearestFlag(name string, known []cli.Flag) string {
	best, bestD := "", 0
	for _, f := range known {
		for _, n := range f.Names() {
			d := textdist.Distance(strings.ToLower(name), strings.ToLower(n))
			if best == "" || d < bestD {
				best, bestD = n, d
			}
		}
	}
	limit := max(2, max(len(name), len(best))/3)
	if best == "" || bestD > limit {
		return ""
	}
	if len(best) == 1 {
		return "-" + best
	}
	return "--" + best
}
