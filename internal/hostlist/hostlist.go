// Package hostlist parses Slurm's compact lists: hostlists
// (SLURM_JOB_NODELIST, node[01-04,07]) and task counts
// (SLURM_TASKS_PER_NODE, 2(x3),1). Both the launcher (flexrun inside an
// allocation) and the rank runtime (srun without flexrun) read them.
package hostlist

import (
	"fmt"
	"strconv"
	"strings"
)

// maxNames bounds how many names one hostlist may expand to, so a typo
// such as node[1-999999999] fails instead of exhausting memory.
const maxNames = 1 << 20

// Expand expands Slurm hostlist syntax (SLURM_JOB_NODELIST,
// SLURM_STEP_NODELIST, scontrol show hostnames): comma-separated
// expressions, each a name with any number of bracket groups. A group holds
// comma-separated numbers and lo-hi ranges; a range whose lower bound has
// leading zeros pads every number to that width. Several groups expand as
// a product, the leftmost group varying slowest:
//
//	node[01-03,07]   node01 node02 node03 node07
//	a[1-2]b[3-4]     a1b3 a1b4 a2b3 a2b4
//	gpu[9-10]-ib     gpu9-ib gpu10-ib
//
// Names are returned in order; duplicates are kept.
func Expand(s string) ([]string, error) {
	exprs, err := splitTopLevel(s)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range exprs {
		if e == "" {
			return nil, fmt.Errorf("hostlist %q: empty host name", s)
		}
		names, err := expandExpr(e, maxNames-len(out))
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", s, err)
		}
		out = append(out, names...)
	}
	return out, nil
}

// splitTopLevel splits s at the commas outside brackets.
func splitTopLevel(s string) ([]string, error) {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			if depth > 0 {
				return nil, fmt.Errorf("hostlist %q: nested '[' at offset %d", s, i)
			}
			depth++
		case ']':
			if depth == 0 {
				return nil, fmt.Errorf("hostlist %q: unmatched ']' at offset %d", s, i)
			}
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("hostlist %q: unclosed '['", s)
	}
	return append(parts, strings.TrimSpace(s[start:])), nil
}

// expandExpr expands one expression (no top-level commas) into at most
// limit names.
func expandExpr(e string, limit int) ([]string, error) {
	names := []string{""}
	for e != "" {
		open := strings.IndexByte(e, '[')
		if open < 0 {
			for i := range names {
				names[i] += e
			}
			break
		}
		closing := strings.IndexByte(e[open:], ']') + open
		prefix, group := e[:open], e[open+1:closing]
		e = e[closing+1:]
		values, err := expandGroup(group, limit)
		if err != nil {
			return nil, err
		}
		if len(names)*len(values) > limit {
			return nil, fmt.Errorf("expands to more than %d names", maxNames)
		}
		next := make([]string, 0, len(names)*len(values))
		for _, n := range names {
			for _, v := range values {
				next = append(next, n+prefix+v)
			}
		}
		names = next
	}
	return names, nil
}

// expandGroup expands the inside of one bracket group: "01-03,07".
func expandGroup(g string, limit int) ([]string, error) {
	if strings.TrimSpace(g) == "" {
		return nil, fmt.Errorf("empty brackets")
	}
	var out []string
	for _, item := range strings.Split(g, ",") {
		item = strings.TrimSpace(item)
		loS, hiS, isRange := strings.Cut(item, "-")
		if !isRange {
			hiS = loS
		}
		lo, err1 := parseIndex(loS)
		hi, err2 := parseIndex(hiS)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("[%s]: %q is not a number or lo-hi range", g, item)
		}
		if hi < lo {
			return nil, fmt.Errorf("[%s]: range %q runs backwards", g, item)
		}
		if hi-lo >= uint64(limit-len(out)) {
			return nil, fmt.Errorf("expands to more than %d names", maxNames)
		}
		width := 0
		if len(loS) > 1 && loS[0] == '0' {
			width = len(loS)
		}
		for v := lo; v <= hi; v++ {
			out = append(out, fmt.Sprintf("%0*d", width, v))
		}
	}
	return out, nil
}

func parseIndex(s string) (uint64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("not a number")
	}
	return strconv.ParseUint(s, 10, 32)
}

// TasksPerNode expands SLURM_TASKS_PER_NODE: comma-separated counts,
// each optionally repeated, "2(x3),1" meaning 2,2,2,1.
func TasksPerNode(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		countS, rep, hasRep := strings.Cut(item, "(x")
		n, err := strconv.Atoi(countS)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: %q is not a task count", s, item)
		}
		times := 1
		if hasRep {
			r, ok := strings.CutSuffix(rep, ")")
			times, err = strconv.Atoi(r)
			if !ok || err != nil || times < 1 {
				return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: %q: want N(xK)", s, item)
			}
		}
		if len(out)+times > maxNames {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: more than %d nodes", s, maxNames)
		}
		for range times {
			out = append(out, n)
		}
	}
	return out, nil
}
