package balance

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

// TestStateRoundTrip: a planner restored from its JSON state makes the
// same decisions as the original from then on.
func TestStateRoundTrip(t *testing.T) {
	sc := scenarios()[5] // degrades and recovers
	orig, err := NewPlanner(sc.specs(), nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	sc.calls = 50 // learn through the start of the slowdown
	sc.run(orig)
	data, err := json.Marshal(orig.State())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	restored, err := Restore(st, sc.specs())
	if err != nil {
		t.Fatal(err)
	}
	sc.calls, sc.seed = 40, 99
	a, b := sc.golden(sc.run(orig)), sc.golden(sc.run(restored))
	if a != b {
		t.Fatalf("restored planner diverges from the original:\n%s", testenv.FirstDiff(a, b))
	}
}

func TestRestoreRejectsOtherLinks(t *testing.T) {
	sc := scenarios()[0]
	p, err := NewPlanner(sc.specs(), nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := p.State()
	other := sc.specs()
	other[1].Kind = fabric.KindNet
	bad := st
	bad.Version = StateVersion + 1
	for _, tc := range []struct {
		name  string
		st    State
		links []LinkSpec
	}{
		{"other kind", st, other},
		{"fewer links", st, sc.specs()[:1]},
		{"other version", bad, sc.specs()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Restore(tc.st, tc.links); !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("error %v, want one wrapping ErrMismatch", err)
			}
		})
	}
	broken := p.State()
	broken.Classes[3].Shares[0] = 5
	if _, err := Restore(broken, sc.specs()); err == nil {
		t.Fatal("shares summing to more than 1 accepted")
	}
}

func TestProfileCache(t *testing.T) {
	dir := t.TempDir()
	sc := scenarios()[0]
	p, err := NewPlanner(sc.specs(), nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	sc.calls = 5
	sc.run(p)
	keys := []string{"hostA:0-hostB:1", "hostA/0-hostB/1", "../escape", "x"}
	for i, k := range keys {
		st := p.State()
		st.Classes[0].Links[0].N = i + 1 // tell the entries apart
		if err := SaveProfile(dir, k, st); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		got, err := LoadProfile(dir, k)
		if err != nil {
			t.Fatalf("load %q: %v", k, err)
		}
		if got.Classes[0].Links[0].N != i+1 {
			t.Fatalf("key %q read another key's entry", k)
		}
		if _, err := Restore(got, sc.specs()); err != nil {
			t.Fatalf("restore %q: %v", k, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "balance", "*"))
	if len(files) != len(keys) {
		t.Fatalf("cache holds %v, want %d files inside %s/balance", files, len(keys), dir)
	}
	if _, err := LoadProfile(dir, "never-saved"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing entry: error %v, want one wrapping fs.ErrNotExist", err)
	}
	if err := os.WriteFile(profilePath(dir, "junk"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProfile(dir, "junk"); err == nil {
		t.Fatal("corrupt entry loaded")
	}
}

func TestCacheDir(t *testing.T) {
	d, err := CacheDir(settings.Map(map[string]string{"FLEXLINK_CACHE_DIR": "/x/y"}))
	if err != nil || d != "/x/y" {
		t.Fatalf("FLEXLINK_CACHE_DIR=/x/y: got %q, %v", d, err)
	}
	d, err = CacheDir(settings.Map(map[string]string{"XDG_CACHE_HOME": "/ignored"}))
	if err == nil && filepath.Base(d) != "flexlink" {
		t.Fatalf("default cache dir %q does not end in flexlink", d)
	}
}
