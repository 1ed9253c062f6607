// Package readme checks README.md against the repository: the figures it
// quotes against docs/PERF.md, its command blocks against the programs
// (flags that flexrun lists, make targets, scripts and packages that
// exist), and it runs the blocks marked "<!-- readme-test: run -->" as
// written, in order, in one shell from the repository root.
package readme

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

const repo = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// block is one fenced code block of the README.
type block struct {
	line int    // of the opening fence, 1-based
	lang string // the fence's info string
	mark string // the readme-test marker just above it ("run", "run torch"), or ""
	text string
}

var markRE = regexp.MustCompile(`^<!-- readme-test: ([a-z ]+) -->$`)

func blocks(readme string) []block {
	var out []block
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		b := block{line: i + 1, lang: strings.TrimPrefix(lines[i], "```")}
		if i > 0 {
			if m := markRE.FindStringSubmatch(lines[i-1]); m != nil {
				b.mark = m[1]
			}
		}
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		b.text = strings.Join(body, "\n")
		out = append(out, b)
	}
	return out
}

// figureRE finds the performance figures the README quotes: a number or a
// range of numbers followed by ×, GB/s or µs.
var figureRE = regexp.MustCompile(`(\d+(?:\.\d+)?)(?:[–-](\d+(?:\.\d+)?))?\s?(×|GB/s|µs)`)

// Every figure the README quotes is in docs/PERF.md: a range ("1.07–1.14×")
// as written there, or both its ends on one line of it (one table row);
// a single figure as a number of its own on some line.
func TestFiguresAreInPerf(t *testing.T) {
	readme, perf := read(t, "README.md"), read(t, "docs/PERF.md")
	numRE := regexp.MustCompile(`\d+(?:\.\d+)?`)
	var lines []map[string]bool
	for _, l := range strings.Split(perf, "\n") {
		m := map[string]bool{}
		for _, n := range numRE.FindAllString(l, -1) {
			m[n] = true
		}
		lines = append(lines, m)
	}
	onOneLine := func(nums ...string) bool {
		for _, l := range lines {
			all := true
			for _, n := range nums {
				all = all && l[n]
			}
			if all {
				return true
			}
		}
		return false
	}
	found := 0
	for _, m := range figureRE.FindAllStringSubmatch(readme, -1) {
		found++
		nums := []string{m[1]}
		if m[2] != "" {
			nums = append(nums, m[2])
			if strings.Contains(perf, m[1]+"–"+m[2]) {
				continue
			}
		}
		if !onOneLine(nums...) {
			t.Errorf("README quotes %q: docs/PERF.md has no line with %s", m[0], strings.Join(nums, " and "))
		}
	}
	if found < 10 {
		t.Errorf("found only %d figures in the README: the pattern no longer matches how it writes them", found)
	}
}

// The pattern itself: it finds ranges, single figures and units as the
// README writes them, and nothing in plain numbers.
func TestFigurePattern(t *testing.T) {
	for text, want := range map[string]string{
		"allgather 1.34–1.46×, then": "1.34–1.46×",
		"at 440–445 GB/s busbw":      "440–445 GB/s",
		"1 MiB: 14.5 µs against":     "14.5 µs",
		"2 ranks and 8 hosts":        "",
	} {
		if got := figureRE.FindString(text); got != want {
			t.Errorf("in %q found %q, want %q", text, got, want)
		}
	}
}

var (
	flexrunHelp string
	helpFlagRE  = regexp.MustCompile(`(?m)(?:^|[ ,])(--?[a-zA-Z][a-zA-Z0-9-]*)`)
)

// knownFlags lists the flags `flexrun --help` prints.
func knownFlags(t *testing.T) map[string]bool {
	t.Helper()
	if flexrunHelp == "" {
		cmd := exec.Command("go", "run", "./cmd/flexrun", "--help")
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("flexrun --help: %v\n%s", err, out)
		}
		flexrunHelp = string(out)
	}
	flags := map[string]bool{}
	for _, line := range strings.Split(flexrunHelp, "\n") {
		head, _, _ := strings.Cut(strings.TrimSpace(line), "  ") // the flag column ends at two spaces
		for _, m := range helpFlagRE.FindAllStringSubmatch(head, -1) {
			flags[strings.TrimLeft(m[1], "-")] = true // urfave/cli takes -name and --name alike
		}
	}
	return flags
}

// flexrunArgs returns the flexrun flags of a command line that starts
// flexrun (after VAR=value assignments): the words before the program.
func flexrunArgs(line string) ([]string, bool) {
	words := strings.Fields(line)
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		words = words[1:]
	}
	if len(words) == 0 || filepath.Base(words[0]) != "flexrun" {
		return nil, false
	}
	var flags []string
	takes := map[string]bool{"-np": true, "-n": true, "-H": true, "-x": true, "-N": true, "--timeout": true, "--nccl-lib": true,
		"--prefix": true, "--hostfile": true, "--map-by": true, "--bind-to": true, "--output-dir": true, "--nnodes": true}
	for i := 1; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") {
			break
		}
		name, _, _ := strings.Cut(w, "=")
		flags = append(flags, name)
		if takes[name] && !strings.Contains(w, "=") {
			i++
		}
	}
	return flags, true
}

// Every command line of the README's shell blocks is checked: flexrun's
// flags are ones `flexrun --help` lists, `make X` names a target of the
// Makefile, scripts/ and examples/ paths exist, `go build` packages exist.
func TestCommandBlocksCheck(t *testing.T) {
	flags := knownFlags(t)
	makefile := read(t, "Makefile")
	pathRE := regexp.MustCompile(`(?:^|[\s/])((?:scripts|examples|cmd|hostfiles)/[A-Za-z0-9_./-]+)`)
	lines := 0
	for _, b := range blocks(read(t, "README.md")) {
		if b.lang != "sh" {
			continue
		}
		for _, line := range strings.Split(b.text, "\n") {
			cmdPart, _, _ := strings.Cut(line, " #")
			cmdPart = strings.TrimSpace(cmdPart)
			if cmdPart == "" || strings.HasPrefix(cmdPart, "#") {
				continue
			}
			lines++
			for _, part := range strings.Split(cmdPart, "&&") {
				part = strings.TrimSpace(part)
				if fl, ok := flexrunArgs(part); ok {
					for _, f := range fl {
						if !flags[strings.TrimLeft(f, "-")] {
							t.Errorf("README line %d: %q: flexrun --help lists no %s", b.line, line, f)
						}
					}
				}
				if w := strings.Fields(part); len(w) >= 2 && w[0] == "make" && !strings.HasPrefix(w[1], "-") {
					for _, target := range w[1:] {
						if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).MatchString(makefile) {
							t.Errorf("README line %d: %q: the Makefile has no target %s", b.line, line, target)
						}
					}
				}
			}
			for _, m := range pathRE.FindAllStringSubmatch(cmdPart, -1) {
				p := strings.TrimRight(m[1], ".")
				if _, err := os.Stat(filepath.Join(repo, p)); err != nil {
					t.Errorf("README line %d: %q: %s does not exist", b.line, line, p)
				}
			}
		}
	}
	if lines < 20 {
		t.Errorf("checked only %d command lines: the README's blocks are no longer found", lines)
	}
}

// The blocks marked "readme-test: run" run as written, in order, in one
// bash from the repository root (so a block's export holds for the next),
// each failing command failing the test. "run torch" blocks need a
// python3 with torch at the path they name.
func TestCommandBlocksRun(t *testing.T) {
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	root, _ := filepath.Abs(repo)
	n := 0
	for _, b := range blocks(read(t, "README.md")) {
		switch b.mark {
		case "run":
		case "run module":
			continue // TestModuleRecipe
		case "run torch":
			if exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run() != nil {
				testenv.Missing(t, "PyTorch", "/usr/bin/python3 cannot import torch (apt-get install python3-torch)")
			}
		default:
			continue
		}
		n++
		script.WriteString("cd " + root + "\necho '### README line " + strconv.Itoa(b.line) + "'\n" + b.text + "\n")
	}
	if n < 4 {
		t.Fatalf("found %d blocks marked to run, want the README's 4 or more", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's blocks: %v\n%s", err, out)
	}
	for _, want := range []string{
		"weights identical on all 2 ranks", "weights identical on all 4 ranks", // train (make demo: 4)
		"external: 4 ranks agree (sum of ranks 6, even ranks 2)", // examples/external, the README's words
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(script.String(), "torch_train.py") && !strings.Contains(string(out), "torch_train: ok, 2 ranks on 1 hosts (gloo)") {
		t.Errorf("the PyTorch block did not print its ok line:\n%s", out)
	}
}

// Every flag of the README's flexrun table is one `flexrun --help` lists.
func TestFlagTableMatchesHelp(t *testing.T) {
	flags := knownFlags(t)
	readme := read(t, "README.md")
	start := strings.Index(readme, "## flexrun")
	end := strings.Index(readme[start:], "Coming from mpirun")
	if start < 0 || end < 0 {
		t.Fatal("README has no flexrun flag table")
	}
	cellRE := regexp.MustCompile("`(--?[a-z][a-z0-9-]*)")
	n := 0
	for _, line := range strings.Split(readme[start:start+end], "\n") {
		if !strings.HasPrefix(line, "| `-") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		for _, m := range cellRE.FindAllStringSubmatch(cell, -1) {
			n++
			if !flags[strings.TrimLeft(m[1], "-")] {
				t.Errorf("README's flag table shows %s; flexrun --help does not list it", m[1])
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d flags in the table, want the 20 or more it shows", n)
	}
}

// Every link to a section of the README (#anchor) names one of its
// headings, as GitHub makes anchors of them.
func TestAnchorsExist(t *testing.T) {
	readme := read(t, "README.md")
	slugs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(readme, -1) {
		s := strings.ToLower(m[1])
		s = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(s, "")
		slugs[strings.ReplaceAll(s, " ", "-")] = true
	}
	links := regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(readme, -1)
	if len(links) == 0 {
		t.Fatal("no section links found")
	}
	for _, l := range links {
		if !slugs[l[1]] {
			t.Errorf("README links to #%s, which no heading makes", l[1])
		}
	}
}

// The README's recipe for another module ("run module") runs as written
// in a fresh module, myproject, holding examples/external's program, with
// a checkout of flexlink beside it (a link to this repository): the
// module builds, and its program runs as a world of one.
func TestModuleRecipe(t *testing.T) {
	var recipe string
	for _, b := range blocks(read(t, "README.md")) {
		if b.mark == "run module" {
			recipe = b.text
		}
	}
	if recipe == "" {
		t.Fatal("README has no block marked readme-test: run module")
	}
	dir := t.TempDir()
	root, _ := filepath.Abs(repo)
	if err := os.Symlink(root, filepath.Join(dir, "flexlink")); err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(dir, "myproject")
	if err := os.Mkdir(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	src := read(t, "examples/external/main.go")
	if err := os.WriteFile(filepath.Join(proj, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "go.mod"), []byte("module example.com/myproject\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\n"+recipe+"\ngo build -o myproject . && ./myproject")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's module recipe: %v\n%s", err, out)
	}
	if want := "external: 1 ranks agree (sum of ranks 0, even ranks 0)"; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}
