package kernels

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestCompiledKernelsMatchSources: the committed compiled kernels were
// built from the committed sources: a change to reduce.cu or flag.cu
// without scripts/gpu-kernels.sh on a machine with nvcc fails here; and
// every file matches the hash its MANIFEST records.
func TestCompiledKernelsMatchSources(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("fatbin", "MANIFEST"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	src, err := SourceHash(".")
	if err != nil {
		t.Fatal(err)
	}
	if m.Source != src {
		t.Fatalf("gpu/kernels/fatbin was built from other sources (MANIFEST %s, reduce.cu+flag.cu now %s): run scripts/gpu-kernels.sh where nvcc exists (the GPU machine) and commit gpu/kernels/fatbin",
			m.Source, src)
	}
	set, err := Dir("fatbin")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Families {
		if _, err := set.Fatbin(f); err != nil {
			t.Error(err)
		}
	}
	emb, ok := Embedded()
	if !ok {
		t.Fatal("the build embeds no kernels")
	}
	if !reflect.DeepEqual(emb.Manifest(), m) {
		t.Errorf("embedded manifest %+v, want the directory's %+v", emb.Manifest(), m)
	}
}

// TestDirRejectsTampered: a file that does not match its MANIFEST hash, or
// a family the set lacks, is an error, never loaded.
func TestDirRejectsTampered(t *testing.T) {
	dir := t.TempDir()
	man, err := os.ReadFile(filepath.Join("fatbin", "MANIFEST"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), man, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f32.fatbin.gz"), []byte("not the file"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Fatbin("f32"); err == nil {
		t.Error("a file that does not match its hash loaded")
	}
	if _, err := set.Fatbin("f128"); err == nil {
		t.Error("an unknown family loaded")
	}
	if _, err := Dir(t.TempDir()); err == nil {
		t.Error("a directory without MANIFEST opened")
	}
}

func TestParseManifest(t *testing.T) {
	good := "# c\nsource abc\nnvcc V13.0.88\nsass 80 90 100\nptx 100\nfamily common 11\nfamily f32 22\n"
	m, err := ParseManifest([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := &Manifest{Source: "abc", NVCC: "V13.0.88", SASS: []int{80, 90, 100}, PTX: 100,
		Families: []string{"common", "f32"}, Sums: map[string]string{"common": "11", "f32": "22"}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got %+v, want %+v", m, want)
	}
	for _, bad := range []string{"", "source abc\n", "source abc\nptx x\nfamily a 1\n", "source abc\nptx 100\nfamily a\n",
		"source abc\nsass 8x\nptx 100\nfamily a 1\n", "source abc\nptx 100\nfamily a 1\nbogus line\n"} {
		if _, err := ParseManifest([]byte(bad)); err == nil {
			t.Errorf("manifest %q parsed", bad)
		}
	}
}

func TestCompiledUsable(t *testing.T) {
	m := &Manifest{SASS: []int{80, 90, 100}, PTX: 100}
	for _, tc := range []struct {
		major, minor     int
		compiled, usable bool
	}{{8, 0, true, true}, {8, 6, true, true}, {8, 9, true, true}, {9, 0, true, true}, {10, 0, true, true}, {10, 3, true, true},
		{12, 0, false, true}, {7, 5, false, false}, {7, 0, false, false}} {
		t.Run(fmt.Sprintf("%d.%d", tc.major, tc.minor), func(t *testing.T) {
			if got := m.Compiled(tc.major, tc.minor); got != tc.compiled {
				t.Errorf("Compiled = %v, want %v", got, tc.compiled)
			}
			if got := m.Usable(tc.major, tc.minor); got != tc.usable {
				t.Errorf("Usable = %v, want %v", got, tc.usable)
			}
		})
	}
}
