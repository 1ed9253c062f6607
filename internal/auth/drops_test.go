package auth

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestDropsRateLimited: the first drop warns, the next ones within Every
// are counted silently, and the WARN after Every says how many.
func TestDropsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	d := &Drops{Log: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn}), What: "test", Every: time.Minute,
		Now: func() time.Time { return now }}
	for range 5 {
		d.Drop(errors.New("bad"))
	}
	if n := strings.Count(buf.String(), "[WARN]"); n != 1 || d.Count() != 5 {
		t.Fatalf("%d WARN lines after 5 drops in one minute (count %d), want 1:\n%s", n, d.Count(), buf.String())
	}
	now = now.Add(time.Minute)
	d.Drop(errors.New("bad"))
	if n := strings.Count(buf.String(), "[WARN]"); n != 2 || !strings.Contains(buf.String(), "dropped=5") {
		t.Fatalf("after a minute: %d WARN lines, want 2, the second with dropped=5:\n%s", n, buf.String())
	}
	var nilDrops *Drops
	nilDrops.Drop(errors.New("ignored")) // must not panic
}
