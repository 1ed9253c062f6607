// Package bounded reads files that users name (topology files, hostfiles,
// key files) with a size limit, so that a wrong path (/dev/zero, a log, a
// disk image) gives one clear error instead of exhausting memory.
package bounded

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is wrapped by the error of a file over its limit.
var ErrTooLarge = errors.New("file too large")

// Limits of the files flexlink reads.
const (
	TopologyFile = 16 << 20 // a topology file (JSON, YAML, NCCL XML)
	Hostfile     = 4 << 20  // an OpenMPI hostfile
	KeyFile      = 64 << 10 // a secret key file
)

// ReadFile reads the file at path, at most limit bytes: a larger file (or
// an endless one, like /dev/zero) is an error wrapping ErrTooLarge that
// names the path and the limit. It reads at most limit+1 bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %s (is it the right file?): %w", path, size(limit), ErrTooLarge)
	}
	return b, nil
}

// size writes n bytes the short way (16 MiB, 64 KiB, 100 bytes).
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
