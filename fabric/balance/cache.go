package balance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/flexlink/flexlink/internal/settings"
)

// This file is the balancer's only I/O: a cache of planner States on disk,
// one JSON file per key (the caller's name for a pair of GPUs and their
// links, e.g. "hostA:0-hostB:1"). It is separate from the Planner so that
// the planner stays a pure function of its inputs.

// CacheDir returns FLEXLINK_CACHE_DIR, or flexlink under the user's cache
// directory (os.UserCacheDir) when it is unset.
func CacheDir(env settings.Env) (string, error) {
	if d := env.String("FLEXLINK_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("balance: no profile cache directory (set FLEXLINK_CACHE_DIR): %w", err)
	}
	return filepath.Join(d, "flexlink"), nil
}

// profilePath maps a key to a file name that is safe on every file system
// and unique: the key's safe characters for people to read, then a hash of
// the exact key so that keys differing only in unsafe characters do not
// collide.
func profilePath(dir, key string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, key)
	if len(safe) > 64 {
		safe = safe[:64]
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, "balance", safe+"-"+hex.EncodeToString(sum[:6])+".json")
}

// SaveProfile writes s under key in dir, atomically (a reader never sees a
// half-written file, and concurrent writers leave one whole file).
func SaveProfile(dir, key string, s State) error {
	path := profilePath(dir, key)
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("balance: encode profile %q: %w", key, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("balance: save profile %q: %w", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".profile-*")
	if err != nil {
		return fmt.Errorf("balance: save profile %q: %w", key, err)
	}
	_, werr := f.Write(append(data, '\n'))
	cerr := f.Close()
	if err := firstErr(werr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("balance: save profile %q to %s: %w", key, f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("balance: save profile %q: %w", key, err)
	}
	return nil
}

// LoadProfile reads the State saved under key in dir. A missing entry
// gives an error wrapping fs.ErrNotExist; a file of another StateVersion
// or one that does not parse gives an error naming the file. Check the
// result against the present links with Restore.
func LoadProfile(dir, key string) (State, error) {
	path := profilePath(dir, key)
	data, err := os.ReadFile(path)
	if err != nil {
		return State{}, fmt.Errorf("balance: load profile %q: %w", key, err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("balance: load profile %q from %s: %w", key, path, err)
	}
	if s.Version != StateVersion {
		return State{}, fmt.Errorf("balance: profile %s has version %d, this build reads %d", path, s.Version, StateVersion)
	}
	return s, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
