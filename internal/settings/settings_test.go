package settings

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite docs/SETTINGS.md's settings table from the registry")

// docs/SETTINGS.md's table must be exactly what the registry declares
// (go test ./internal/settings -update rewrites it).
func TestReadmeTableMatchesRegistry(t *testing.T) {
	const path = "../../docs/SETTINGS.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		s := string(b)
		start := strings.Index(s, "| variable | default | meaning |")
		if start < 0 {
			t.Fatal("docs/SETTINGS.md has no settings table")
		}
		end := len(s) // the table ends the file

		s = s[:start] + Markdown() + s[end:]
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		b = []byte(s)
	}
	if !strings.Contains(string(b), Markdown()) {
		t.Fatalf("docs/SETTINGS.md's settings table is out of date (go test ./internal/settings -update); replace it with:\n%s", Markdown())
	}
}

func TestNamesUniqueAndPrefixed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Table {
		if !strings.HasPrefix(s.Name, "FLEXLINK_") || s.Doc == "" {
			t.Errorf("bad setting %+v", s)
		}
		if seen[s.Name] {
			t.Errorf("%s declared twice", s.Name)
		}
		seen[s.Name] = true
	}
}

func TestParsing(t *testing.T) {
	env := Map(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "90", "FLEXLINK_TIMEOUT": "1m30s",
		"FLEXLINK_CHUNK_BYTES": "x", "FLEXLINK_REQUIRE_SYSTEM": "yes", "FLEXLINK_ALGO": ""})
	if d, err := env.Duration("FLEXLINK_BOOTSTRAP_TIMEOUT"); err != nil || d != 90*time.Second {
		t.Errorf("bare seconds: %v %v", d, err)
	}
	if d, err := env.Duration("FLEXLINK_TIMEOUT"); err != nil || d != 90*time.Second {
		t.Errorf("duration: %v %v", d, err)
	}
	if _, err := env.Int("FLEXLINK_CHUNK_BYTES"); err == nil {
		t.Error("non-integer accepted")
	}
	if !env.Bool("FLEXLINK_REQUIRE_SYSTEM") {
		t.Error("yes is true")
	}
	if env.String("FLEXLINK_ALGO") != "auto" || env.IsSet("FLEXLINK_ALGO") {
		t.Error("empty value must fall back to the default")
	}
	defer func() {
		if recover() == nil {
			t.Error("undeclared setting did not panic")
		}
	}()
	env.String("FLEXLINK_NOT_DECLARED")
}
