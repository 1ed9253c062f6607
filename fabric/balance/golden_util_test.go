package balance

import (
	"fmt"
	"strings"
)

// firstDiff shows the first line where two traces differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n want %q\n got  %q", i+1, wl, gl)
		}
	}
	return "(no difference)"
}
