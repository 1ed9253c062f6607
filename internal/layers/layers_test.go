package layers

import (
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// order lists package path prefixes from the top layer down. A package
// belongs to the layer of its longest matching prefix, and may import only
// packages of strictly lower layers (a larger index). Entries that share a
// line are one layer: they must not import each other.
var order = [][]string{
	{"cmd/", "examples", "tests", "launcher/clustertest", "proxy/pxntest", "internal/layers"},
	{"capi", "launcher", "cmd/flexbench/internal"},
	{"rank"},
	{"internal/comm"},
	{"internal/worldtest"},
	{"internal/comm/join"},
	{"collectives/direct", "collectives/staged", "proxy"},
	{"collectives/flagplane"},
	{"collectives/plane", "proxy/pxn"},
	{"collectives"},
	{"fabric/shares"},
	{"fabric/netshare"},
	{"fabric/transports"},
	{"fabric/multilink", "fabric/linktest", "fabric/net/netlink", "fabric/net/ucx/ucxtest", "fabric/pcieshare"},
	{"fabric/linkshare"},
	{"fabric/shm", "fabric/nvlink", "fabric/pcie", "fabric/fake", "fabric/topo", "fabric/balance",
		"fabric/net/tcp", "fabric/net/ucx", "fabric/net/nettest", "fabric/net/hello"},
	{"fabric/net", "fabric/internal", "fabric/net/ucx/internal"},
	{"fabric"},
	{"gpu/gpufake"},
	{"gpu"},
	{"gpu/kernels"},
	{"gpu/internal/cufake"},
	{"gpu/internal/cu"},
	{"bootstrap"},
	{"reduce", "internal/testenv"},
	{"internal/settings"},
	{"dtype", "mem", "internal/errs", "internal/hostlist", "internal/textdist", "internal/flog", "internal/pause", "internal/auth", "internal/bounded", "internal/ports", "internal/memcopy", "internal/ccall"},
}

// testOnly packages are never linked into programs.
var testOnly = []string{"internal/worldtest", "gpu/gpufake", "fabric/fake", "fabric/linktest", "fabric/net/nettest", "fabric/net/ucx/ucxtest", "internal/testenv"}

func layerOf(pkg string) (int, bool) {
	best, layer := -1, -1
	for i, l := range order {
		for _, p := range l {
			if (pkg == p || strings.HasPrefix(pkg, strings.TrimSuffix(p, "/")+"/")) && len(p) > best {
				best, layer = len(p), i
			}
		}
	}
	return layer, layer >= 0
}

func TestImportsFlowDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/flexlink/flexlink/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], "github.com/flexlink/flexlink/")
		from, ok := layerOf(pkg)
		if !ok {
			bad = append(bad, pkg+": in no layer (add it to order)")
			continue
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, "github.com/flexlink/flexlink/") {
				continue
			}
			imp = strings.TrimPrefix(imp, "github.com/flexlink/flexlink/")
			to, ok := layerOf(imp)
			if !ok {
				bad = append(bad, imp+": in no layer (add it to order)")
				continue
			}
			if to <= from {
				bad = append(bad, pkg+" imports "+imp+" (same or higher layer)")
			}
			for _, p := range testOnly {
				if imp == p && !strings.HasPrefix(pkg, p) && !isTestSupport(pkg) {
					bad = append(bad, pkg+" imports test-only "+imp)
				}
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

func isTestSupport(pkg string) bool {
	for _, p := range testOnly {
		if pkg == p {
			return true
		}
	}
	return false
}

func TestLayerOf(t *testing.T) {
	for _, c := range []struct {
		pkg  string
		want string
	}{
		{"rank", "rank"},
		{"internal/comm/join", "internal/comm/join"},
		{"gpu/internal/cu", "gpu/internal/cu"},
		{"fabric/net/tcp", "fabric/net/tcp"},
		{"cmd/flexbench/internal/nccl", "launcher"},
		{"cmd/flexrun", "examples"},
	} {
		got, ok := layerOf(c.pkg)
		want, _ := layerOf(c.want)
		if !ok || got != want {
			t.Errorf("layerOf(%q) = %d, want the layer of %q (%d)", c.pkg, got, c.want, want)
		}
	}
	if _, ok := layerOf("nosuch"); ok {
		t.Error("an unknown package got a layer")
	}
}

// TestArchitectureDoc: docs/ARCHITECTURE.md's layer table lists order, row
// for row, every package of a layer in its row (each a `code` span in the
// first column).
func TestArchitectureDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Layers"
		case in && strings.HasPrefix(line, "| `"):
			first := strings.SplitN(strings.TrimPrefix(line, "| "), " |", 2)[0]
			var pkgs []string
			for _, f := range strings.Split(first, ",") {
				pkgs = append(pkgs, strings.Trim(strings.TrimSpace(f), "`"))
			}
			rows = append(rows, pkgs)
		}
	}
	if len(rows) != len(order) {
		t.Errorf("docs/ARCHITECTURE.md's layer table has %d rows, order has %d layers", len(rows), len(order))
	}
	for i := range min(len(rows), len(order)) {
		got, want := slices.Clone(rows[i]), slices.Clone(order[i])
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("docs/ARCHITECTURE.md's layer row %d lists %v, order's layer %d is %v", i+1, rows[i], i, order[i])
		}
	}
}
