package bounded

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFile: a file within the limit is read whole; one over it, or an
// endless device, is ErrTooLarge naming the path and the limit; a missing
// file keeps os's error.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte("x"), n), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		path  string
		limit int64
		want  int   // bytes read when no error
		err   error // errors.Is target; nil: success
		words string
	}{
		{"at the limit", write("at", 1024), 1024, 1024, nil, ""},
		{"empty", write("empty", 0), 1024, 0, nil, ""},
		{"one byte over", write("over", 1025), 1024, 0, ErrTooLarge, "over: more than 1 KiB"},
		{"endless /dev/zero", "/dev/zero", 1 << 20, 0, ErrTooLarge, "/dev/zero: more than 1 MiB"},
		{"endless /dev/urandom", "/dev/urandom", 100, 0, ErrTooLarge, "/dev/urandom: more than 100 bytes"},
		{"missing", filepath.Join(dir, "none"), 1024, 0, os.ErrNotExist, "none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ReadFile(tc.path, tc.limit)
			if tc.err == nil {
				if err != nil || len(b) != tc.want {
					t.Fatalf("ReadFile = %d bytes, %v; want %d bytes", len(b), err, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("ReadFile error %v, want %v saying %q", err, tc.err, tc.words)
			}
		})
	}
}
