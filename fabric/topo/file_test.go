package topo

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

var fixtureNames = []string{"dgx-h800.json", "dgx1.json", "dgx1.xml", "h200x2.json", "nogpu.yaml"}

// TestDumpLoadRoundTrip: every fixture dumped as JSON and as YAML loads
// back equal.
func TestDumpLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, name := range fixtureNames {
		for _, ext := range []string{".json", ".yaml"} {
			t.Run(name+ext, func(t *testing.T) {
				h := fixture(t, name)
				path := filepath.Join(dir, name+ext)
				if err := Dump(path, h); err != nil {
					t.Fatal(err)
				}
				got, err := Load(path)
				if err != nil {
					t.Fatal(err)
				}
				got.Source = h.Source
				if !reflect.DeepEqual(got, h) {
					a, _ := h.JSON()
					b, _ := got.JSON()
					t.Errorf("round trip differs:\n%s\n---\n%s", a, b)
				}
			})
		}
	}
}

func TestYAMLReadsAsYAML(t *testing.T) {
	b, err := fixture(t, "h200x2.json").YAML()
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"hostname: h200x2\n", "      root: pci0000:00\n", `"1": ok`} {
		if !strings.Contains(s, want) {
			t.Errorf("YAML lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "{") {
		t.Errorf("YAML in flow style:\n%s", s)
	}
}

func TestDumpXMLNotSupported(t *testing.T) {
	err := Dump(filepath.Join(t.TempDir(), "t.xml"), fixture(t, "dgx1.json"))
	if !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("Dump .xml: %v, want ErrNotSupported", err)
	}
}

// TestLocalFromSettings: FLEXLINK_TOPO_FILE loads (renamed to this host),
// FLEXLINK_RAILS reassigns rails, FLEXLINK_TOPO_DUMP_FILE writes it out.
func TestLocalFromSettings(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "in.xml")
	data, err := os.ReadFile(filepath.Join("..", "..", "hostfiles", "topo", "dgx1.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(dir, "out.json")
	env := settings.Map(map[string]string{
		"FLEXLINK_TOPO_FILE":      src,
		"FLEXLINK_TOPO_DUMP_FILE": dump,
		"FLEXLINK_RAILS":          "mlx5_3,mlx5_2",
	})
	h, err := Local(env, Options{Hostname: "node7"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Hostname != "node7" || len(h.GPUs) != 8 {
		t.Errorf("hostname %q, %d GPUs", h.Hostname, len(h.GPUs))
	}
	want := map[string]int{"mlx5_3": 0, "mlx5_2": 1, "mlx5_0": -1, "mlx5_1": -1}
	for name, rail := range want {
		if got := h.NICs[nicByName(h, name)].Rail; got != rail {
			t.Errorf("%s rail %d, want %d", name, got, rail)
		}
	}
	d, err := Load(dump)
	if err != nil {
		t.Fatal(err)
	}
	if d.Hostname != "node7" || len(d.GPUs) != 8 {
		t.Errorf("dump: hostname %q, %d GPUs", d.Hostname, len(d.GPUs))
	}

	bad := settings.Map(map[string]string{"FLEXLINK_TOPO_FILE": src, "FLEXLINK_RAILS": "mlx5_9"})
	if _, err := Local(bad, Options{Hostname: "node7"}); err == nil || !strings.Contains(err.Error(), "mlx5_9") {
		t.Errorf("FLEXLINK_RAILS naming a missing NIC: %v", err)
	}
	missing := settings.Map(map[string]string{"FLEXLINK_TOPO_FILE": filepath.Join(dir, "nope.json")})
	if _, err := Local(missing, Options{}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing FLEXLINK_TOPO_FILE: %v", err)
	}
}
