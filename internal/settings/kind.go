package settings

import (
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind says which values a setting takes. Check is given a non-empty
// value (an empty one means the default); Allowed says in words what is
// allowed, for error messages.
type Kind struct {
	Allowed string
	check   func(v string) error
	bytes   bool // Env.Int takes K, M, G suffixes
}

// Check reports whether v (non-empty) is a value of the kind.
func (k Kind) Check(v string) error {
	if k.check == nil {
		return nil
	}
	return k.check(v)
}

// KindInt is an integer from min to max, or one of words (such as all).
func KindInt(min, max int64, words ...string) Kind {
	allowed := "an integer " + span(min, max, strconv.FormatInt)
	if len(words) > 0 {
		allowed = strings.Join(words, ", ") + " or " + allowed
	}
	return Kind{Allowed: allowed, check: func(v string) error {
		if slices.Contains(words, strings.TrimSpace(v)) {
			return nil
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < min || n > max {
			return errBad
		}
		return nil
	}}
}

// KindBytes is a size in bytes from min to max, written as an integer
// with an optional K, M or G suffix (KiB, MiB, GiB; "64K"), or one of
// words (such as auto).
func KindBytes(min, max int64, words ...string) Kind {
	allowed := "a size in bytes " + span(min, max, fmtBytes) + " (suffixes K, M, G)"
	if len(words) > 0 {
		allowed = strings.Join(words, ", ") + " or " + allowed
	}
	return Kind{Allowed: allowed, bytes: true, check: func(v string) error {
		if slices.Contains(words, strings.TrimSpace(v)) {
			return nil
		}
		n, err := parseBytes(v)
		if err != nil || n < min || n > max {
			return errBad
		}
		return nil
	}}
}

// KindDuration is a duration of zero or more: a Go duration ("90s",
// "1m30s", "500ms") or a bare number of seconds.
func KindDuration() Kind {
	return Kind{Allowed: "a duration of 0 or more, like 90s, 1m30s or 500ms (a bare number is seconds)", check: func(v string) error {
		d, err := parseDuration(v)
		if err != nil || d < 0 {
			return errBad
		}
		return nil
	}}
}

// KindPositiveDuration is a duration of more than zero (a timeout where
// zero would mean nothing sensible).
func KindPositiveDuration() Kind {
	return Kind{Allowed: "a duration of more than 0, like 90s, 1m30s or 500ms (a bare number is seconds)", check: func(v string) error {
		d, err := parseDuration(v)
		if err != nil || d <= 0 {
			return errBad
		}
		return nil
	}}
}

// KindBool is a yes/no switch: 1, true, yes, on or 0, false, no, off (any case).
func KindBool() Kind {
	return Kind{Allowed: "1, true, yes, on, 0, false, no or off", check: func(v string) error {
		if _, ok := parseBool(v); !ok {
			return errBad
		}
		return nil
	}}
}

// KindWord is one of words (any case).
func KindWord(words ...string) Kind {
	return Kind{Allowed: "one of " + strings.Join(words, ", "), check: func(v string) error {
		if !containsFold(words, strings.TrimSpace(v)) {
			return errBad
		}
		return nil
	}}
}

// KindList is a comma-separated list of words (any case; empty entries
// are ignored), or of free names when words is empty.
func KindList(words ...string) Kind {
	if len(words) == 0 {
		return Kind{Allowed: "a comma-separated list of names"}
	}
	return Kind{Allowed: "a comma-separated list of " + strings.Join(words, ", "), check: func(v string) error {
		for _, w := range strings.Split(v, ",") {
			if w = strings.TrimSpace(w); w != "" && !containsFold(words, w) {
				return fmt.Errorf("%q is none of them", w)
			}
		}
		return nil
	}}
}

// KindListExcept is KindList where a leading ^ means "all but these"
// (NCCL_DEBUG_SUBSYS's syntax).
func KindListExcept(words ...string) Kind {
	k := KindList(words...)
	k.Allowed += " (^ first: all but these)"
	list := k.check
	k.check = func(v string) error { return list(strings.TrimPrefix(strings.TrimSpace(v), "^")) }
	return k
}

// KindFloat is a number from min to max.
func KindFloat(min, max float64) Kind {
	return Kind{Allowed: fmt.Sprintf("a number from %g to %g", min, max), check: func(v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || f < min || f > max {
			return errBad
		}
		return nil
	}}
}

// KindString is any text (a path, a name).
func KindString() Kind { return Kind{Allowed: "any text"} }

// KindAddr is host:port.
func KindAddr() Kind {
	return Kind{Allowed: "host:port", check: func(v string) error {
		_, port, err := net.SplitHostPort(strings.TrimSpace(v))
		if err != nil {
			return errBad
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return errBad
		}
		return nil
	}}
}

// KindHex is bytes in hexadecimal.
func KindHex() Kind {
	return Kind{Allowed: "hexadecimal bytes", check: func(v string) error {
		if _, err := hex.DecodeString(strings.TrimSpace(v)); err != nil {
			return errBad
		}
		return nil
	}}
}

// errBad is a check's failure whose details the Allowed words give.
var errBad = fmt.Errorf("not allowed")

func span[T int64](min, max T, f func(T, int) string) string {
	switch {
	case max == math.MaxInt64:
		return "of " + f(min, 10) + " or more"
	case min == max:
		return f(min, 10)
	}
	return "from " + f(min, 10) + " to " + f(max, 10)
}

func fmtBytes(n int64, _ int) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// parseBytes reads 4194304, 64K, 4M, 1G (powers of 1024; KiB, MiB, GiB
// and lower case too).
func parseBytes(v string) (int64, error) {
	s := strings.ToUpper(strings.TrimSpace(v))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, errBad
	}
	return n * mult, nil
}

// parseDuration reads a Go duration; a bare number is seconds.
func parseDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(n) || math.Abs(n) > math.MaxInt64/float64(time.Second) {
			return 0, errBad
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

func parseBool(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

func containsFold(words []string, w string) bool {
	return slices.ContainsFunc(words, func(x string) bool { return strings.EqualFold(x, w) })
}
