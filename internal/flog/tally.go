package flog

import (
	"slices"
	"strings"
)

// Tally writes m as "a:1/b:2" in the order of its keys, each value as
// format writes it; "none" when m is empty.
func Tally[V any](m map[string]V, format func(V) string) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(k + ":" + format(m[k]))
	}
	return b.String()
}
