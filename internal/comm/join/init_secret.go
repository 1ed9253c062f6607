package join

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/flexlink/flexlink/internal/auth"
	"github.com/flexlink/flexlink/internal/bounded"
	"github.com/flexlink/flexlink/internal/settings"
)

// jobSecret is the secret of a job started without flexrun. With
// FLEXLINK_JOB_SECRET set (hex) it is that. Otherwise it is derived as
// auth.Proof(key, "flexlink job secret v2", label) (HMAC-SHA256 keyed by
// key over the length-prefixed purpose and label) from the user's key
// file (FLEXLINK_KEY_FILE, default ~/.config/flexlink/job.key), which is
// created with 32 random bytes and mode 0600 when missing. label names the
// job (launcher, job and step ids), so each job gets its own secret, and
// only processes that can read the key file (the user's own, and root's)
// can compute it. hint says where the secret came from, for errors.
func jobSecret(env settings.Env, label string) (secret []byte, hint string, err error) {
	if v := env.String("FLEXLINK_JOB_SECRET"); v != "" {
		b, err := hex.DecodeString(v)
		if err != nil || len(b) == 0 {
			return nil, "", errors.New("FLEXLINK_JOB_SECRET is not hex")
		}
		return b, " (secret from FLEXLINK_JOB_SECRET: every rank needs the same)", nil
	}
	path := env.String("FLEXLINK_KEY_FILE")
	if path == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return nil, "", fmt.Errorf("find the key file: %w (set FLEXLINK_KEY_FILE or FLEXLINK_JOB_SECRET)", err)
		}
		path = filepath.Join(dir, "flexlink", "job.key")
	}
	key, err := loadKey(path)
	if err != nil {
		return nil, "", err
	}
	hint = fmt.Sprintf(" (job secret derived from %s: every host must hold the same file; see docs/LAUNCH.md)", path)
	return auth.Proof(key, "flexlink job secret v2", []byte(label)), hint, nil
}

// loadKey reads the key file, creating it first when missing. Creation is
// atomic (a complete temporary file hard-linked into place), so ranks that
// race to create it all end up reading the winner's key.
func loadKey(path string) ([]byte, error) {
	key, err := readKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".job.key-*")
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("key file: %w", err)
	}
	_, err = tmp.WriteString(hex.EncodeToString(raw) + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return readKey(path)
}

// readKey reads a key file: at least 16 bytes of hex, readable by its
// owner only.
func readKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key file %s has mode %v: others could compute job secrets; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := bounded.ReadFile(path, bounded.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("key file %s: want at least 16 bytes in hex", path)
	}
	return key, nil
}
