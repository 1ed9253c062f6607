package main

import (
	"fmt"
	"strings"

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
			d := editDistance(strings.ToLower(name), strings.ToLower(n))
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

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
