// Package kernels holds flexlink's CUDA kernels, compiled from reduce.cu
// (which includes flag.cu) beside it and embedded in the binary: one
// gzipped fatbin per family (fatbin/, made by scripts/gpu-kernels.sh on a
// machine with nvcc; see README.md), each with SASS for the architectures
// in its MANIFEST and PTX for the newest, which the driver JIT-compiles on
// later GPUs. Package gpu loads a family with cuModuleLoadData when a
// communicator first needs one of its kernels.
package kernels

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/flexlink/flexlink/internal/errs"
)

//go:generate sh -c "cd ../.. && scripts/gpu-kernels.sh"

// Common is the family of the byte copies and the flag gather; every other
// family is one dtype's kernels, named by its kernel suffix ("f32").
const Common = "common"

// maxFatbin bounds a decompressed family (the largest is about 3 MB).
const maxFatbin = 64 << 20

// Manifest describes a set of compiled kernels (fatbin/MANIFEST).
type Manifest struct {
	Source   string            // SHA-256 of reduce.cu then flag.cu
	NVCC     string            // the compiler's version, e.g. V13.0.88
	SASS     []int             // architectures with compiled code, e.g. 80 90 100
	PTX      int               // the architecture of the PTX, e.g. 100
	Families []string          // in build order
	Sums     map[string]string // family -> SHA-256 of its .fatbin.gz
}

// ParseManifest reads a MANIFEST file's text.
func ParseManifest(b []byte) (*Manifest, error) {
	m := &Manifest{Sums: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func() error { return fmt.Errorf("kernel manifest line %d: %q", line, sc.Text()) }
		switch {
		case f[0] == "source" && len(f) == 2:
			m.Source = f[1]
		case f[0] == "nvcc" && len(f) == 2:
			m.NVCC = f[1]
		case f[0] == "sass" && len(f) >= 2:
			for _, a := range f[1:] {
				v, err := strconv.Atoi(a)
				if err != nil {
					return nil, bad()
				}
				m.SASS = append(m.SASS, v)
			}
		case f[0] == "ptx" && len(f) == 2:
			v, err := strconv.Atoi(f[1])
			if err != nil {
				return nil, bad()
			}
			m.PTX = v
		case f[0] == "family" && len(f) == 3:
			m.Families = append(m.Families, f[1])
			m.Sums[f[1]] = f[2]
		default:
			return nil, bad()
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if m.Source == "" || len(m.Families) == 0 || m.PTX == 0 {
		return nil, fmt.Errorf("kernel manifest: no source hash, family or ptx line")
	}
	return m, nil
}

// Compiled reports whether the files hold SASS for a GPU of compute
// capability major.minor, so that loading them compiles nothing. SASS runs
// on later minor versions of its major one (sm_80 on 8.6 and 8.9). Float8
// families have no sm_80 code (their conversions need sm_89); they are not
// used below 9.0.
func (m *Manifest) Compiled(major, minor int) bool {
	cc := major*10 + minor
	for _, a := range m.SASS {
		if a/10 == major && a <= cc {
			return true
		}
	}
	return false
}

// Usable reports whether a GPU of compute capability major.minor can run
// the files at all: from SASS, or from the PTX, which the driver compiles
// for any later architecture.
func (m *Manifest) Usable(major, minor int) bool {
	return m.Compiled(major, minor) || major*10+minor >= m.PTX
}

// Set is a set of compiled kernels: the embedded one (Embedded) or a
// directory laid out like fatbin/ (Dir).
type Set struct {
	fsys     fs.FS
	where    string
	manifest *Manifest
}

// Embedded returns the kernels built into this binary, or ok=false in a
// build that carries none (tag flexlink_noptx: scripts/gpu-build.sh,
// whose binaries are pointed at a directory with FLEXLINK_GPU_KERNELS).
func Embedded() (*Set, bool) {
	b, err := fs.ReadFile(embedded, "fatbin/MANIFEST")
	if err != nil {
		return nil, false
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, false
	}
	sub, err := fs.Sub(embedded, "fatbin")
	if err != nil {
		return nil, false
	}
	return &Set{fsys: sub, where: "embedded", manifest: m}, true
}

// Dir opens the compiled kernels in dir (FLEXLINK_GPU_KERNELS).
func Dir(dir string) (*Set, error) {
	b, err := readBounded(os.DirFS(dir), "MANIFEST", 1<<20)
	if err != nil {
		return nil, fmt.Errorf("kernels in %s: %w", dir, err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("kernels in %s: %w", dir, err)
	}
	return &Set{fsys: os.DirFS(dir), where: dir, manifest: m}, nil
}

// Manifest describes the set.
func (s *Set) Manifest() *Manifest { return s.manifest }

// Where says where the set comes from: "embedded" or its directory.
func (s *Set) Where() string { return s.where }

// Fatbin returns family's fatbin, decompressed and checked against the
// manifest's hash. A family the set lacks is an error wrapping
// errs.ErrNotSupported.
func (s *Set) Fatbin(family string) ([]byte, error) {
	sum, ok := s.manifest.Sums[family]
	if !ok {
		return nil, fmt.Errorf("kernels (%s): no family %q: %w", s.where, family, errs.ErrNotSupported)
	}
	name := family + ".fatbin.gz"
	gz, err := readBounded(s.fsys, name, maxFatbin)
	if err != nil {
		return nil, fmt.Errorf("kernels (%s): %w", s.where, err)
	}
	if h := sha256.Sum256(gz); hex.EncodeToString(h[:]) != sum {
		return nil, fmt.Errorf("kernels (%s): %s does not match its MANIFEST hash (rebuild with scripts/gpu-kernels.sh)", s.where, name)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("kernels (%s): %s: %w", s.where, name, err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxFatbin+1))
	if err != nil {
		return nil, fmt.Errorf("kernels (%s): %s: %w", s.where, name, err)
	}
	if len(out) > maxFatbin {
		return nil, fmt.Errorf("kernels (%s): %s decompresses past %d bytes", s.where, name, maxFatbin)
	}
	return out, nil
}

// readBounded reads name from fsys, refusing files over limit bytes.
func readBounded(fsys fs.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes", name, limit)
	}
	return b, nil
}

// SourceHash is the SHA-256 that MANIFEST's source line records for the
// kernel sources in dir (reduce.cu, then flag.cu).
func SourceHash(dir string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"reduce.cu", "flag.cu"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HasFamily reports whether m lists family.
func (m *Manifest) HasFamily(family string) bool { return slices.Contains(m.Families, family) }
