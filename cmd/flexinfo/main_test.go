package main

import (
	"bytes"
	"encoding/xml"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var fixtures = []string{"dgx-a100.json", "dgx-h800.json", "dgx1.json", "dgx1.xml", "h200x2.json", "nogpu.yaml"}

func fixturePath(name string) string { return filepath.Join("..", "..", "hostfiles", "topo", name) }

// run runs flexinfo with args and the given environment.
func run(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := newApp(&out, settings.Map(env)).Run(append([]string{"flexinfo"}, args...))
	return out.String(), err
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testenv.Golden(t, filepath.Join("testdata", name), []byte(got), *update)
}

func TestMatrixGolden(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			out, err := run(t, nil, "--topo", fixturePath(name))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name+".txt", out)
		})
	}
}

func TestDotGolden(t *testing.T) {
	out, err := run(t, nil, "--topo", fixturePath("dgx1.json"), "--dot")
	if err != nil {
		t.Fatal(err)
	}
	// The DGX-1 joins 16 GPU pairs by NVLink; 8 GPUs and 5 NICs hang
	// below 2 CPUs through 4 switches.
	if n := strings.Count(out, "penwidth=2"); n != 16 {
		t.Errorf("%d NVLink edges, want 16", n)
	}
	if n := strings.Count(out, "fillcolor="); n != 8+5+2+4 {
		t.Errorf("%d nodes, want 19", n)
	}
	golden(t, "dgx1.dot", out)
}

func TestJSONAndYAMLOutput(t *testing.T) {
	for _, name := range fixtures {
		want, err := topo.Load(fixturePath(name))
		if err != nil {
			t.Fatal(err)
		}
		for _, format := range []string{"--json", "--yaml"} {
			out, err := run(t, nil, "--topo", fixturePath(name), format)
			if err != nil {
				t.Fatal(err)
			}
			got, err := topo.Parse([]byte(out))
			if err != nil {
				t.Fatalf("%s %s: %v", name, format, err)
			}
			got.Source = want.Source
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s %s: output does not load back as the fixture", name, format)
			}
		}
	}
}

func TestPictures(t *testing.T) {
	for _, tc := range []struct {
		name          string
		boxes, nvlink int // boxes: devices, CPUs, switches, NVSwitches
		nvswitch      bool
	}{
		{"dgx-h800.json", 8 + 9 + 2 + 8 + 4, 32, true},
		{"dgx1.json", 8 + 5 + 2 + 4, 16, false},
		{"h200x2.json", 2 + 1 + 1, 1, false},
		{"nogpu.yaml", 1 + 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			svgPath, pngPath := filepath.Join(dir, "t.svg"), filepath.Join(dir, "t.png")
			out, err := run(t, nil, "--topo", fixturePath(tc.name), "--svg", svgPath, "--png", pngPath)
			if err != nil || out != "" {
				t.Fatalf("err %v, output %q (pictures only: no report)", err, out)
			}
			s, err := os.ReadFile(svgPath)
			if err != nil {
				t.Fatal(err)
			}
			counts := svgElements(t, s)
			if counts["rect"] != tc.boxes+1 { // and the background
				t.Errorf("svg: %d rects, want %d", counts["rect"]-1, tc.boxes)
			}
			nvl := strings.Count(string(s), `stroke="`+nvlColor+`"`)
			if nvl != tc.nvlink {
				t.Errorf("svg: %d NVLink lines, want %d", nvl, tc.nvlink)
			}
			f, err := os.Open(pngPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatal(err)
			}
			sc := layout(mustLoad(t, tc.name))
			if b := img.Bounds(); b.Dx() < int(sc.w) || b.Dy() < int(sc.h) {
				t.Errorf("png %v, want %.0fx%.0f", b, sc.w, sc.h)
			}
			seen := map[string]bool{}
			for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
				for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
					for _, kind := range nodeKinds() {
						if img.At(x, y) == hexColor(fill(kind)) {
							seen[kind] = true
						}
					}
				}
			}
			if !seen[kindNIC] || !seen[kindCPU] || seen[kindNVSwitch] != tc.nvswitch {
				t.Errorf("png shows %v; want NICs, CPUs, NVSwitches %v", seen, tc.nvswitch)
			}
		})
	}
}

func mustLoad(t *testing.T, name string) *topo.Host {
	t.Helper()
	h, err := topo.Load(fixturePath(name))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// svgElements checks that b is well-formed XML and counts its elements.
func svgElements(t *testing.T, b []byte) map[string]int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	n := map[string]int{}
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("svg is not well-formed: %v", err)
			}
			return n
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}

// TestRailsSetting: with only mlx5_3 and mlx5_1 railed, every GPU of a
// socket sends from that socket's railed NIC (PIX for the GPUs under its
// switch, PHB for the others).
func TestRailsSetting(t *testing.T) {
	out, err := run(t, map[string]string{"FLEXLINK_RAILS": "mlx5_3,mlx5_1"}, "--topo", fixturePath("dgx1.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rail 0: mlx5_3  GPU4 GPU5 GPU6 GPU7\n", "rail 1: mlx5_1  GPU0 GPU1 GPU2 GPU3\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "rail 2:") {
		t.Errorf("only two rails were named")
	}
}

func TestErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--topo", "no-such-file.json"},
		{"stray"},
		{"--bogus"},
	} {
		if _, err := run(t, nil, args...); err == nil {
			t.Errorf("flexinfo %q: no error", args)
		}
	}
}

// TestDetectEmptySysfs runs detection against an empty sysfs: no NIC, and
// either GPUs (on a GPU machine) or the reason there are none.
func TestDetectEmptySysfs(t *testing.T) {
	out, err := run(t, nil, "--sysfs", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "No GPU: NVML") && !strings.Contains(out, "GPU0") {
		t.Errorf("neither GPUs nor a reason:\n%s", out)
	}
	if !strings.Contains(out, "host: numa nodes:") {
		t.Errorf("unreadable NUMA nodes not reported:\n%s", out)
	}
}
