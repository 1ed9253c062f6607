package launcher

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// writeLog records each Write call separately.
type writeLog struct {
	mu     sync.Mutex
	writes []string
	fail   bool
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	if w.fail {
		return 0, errors.New("broken")
	}
	return len(p), nil
}

// chunkReader returns its chunks one Read at a time, like a pipe does.
type chunkReader struct{ chunks []string }

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	if r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

func TestForwarder(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		prefix string
		max    int
		want   []string // Write calls on the destination
	}{
		{"whole lines", []string{"a\nbb\n"}, "", 8, []string{"a\n", "bb\n"}},
		{"line across reads", []string{"ab", "c", "d\ne"}, "", 8, []string{"abcd\n", "e\n"}},
		{"final line gets a newline", []string{"x\ny"}, "", 8, []string{"x\n", "y\n"}},
		{"empty lines kept", []string{"\n\n"}, "", 8, []string{"\n", "\n"}},
		{"prefix on every line", []string{"a\nb"}, "[3] ", 8, []string{"[3] a\n", "[3] b\n"}},
		{"exactly max is one line", []string{"12345678\n"}, "", 8, []string{"12345678\n"}},
		{"long line split at max", []string{"1234567890abcdefXYZ\n"}, "[0] ", 8, []string{"[0] 12345678\n", "[0] 90abcdef\n", "[0] XYZ\n"}},
		{"long line across reads", []string{"12345", "67890", "abc"}, "", 4, []string{"1234\n", "5678\n", "90ab\n", "c\n"}},
		{"nothing", nil, "", 8, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var dst writeLog
			var file bytes.Buffer
			f := forwarder{dst: &dst, file: &file, prefix: []byte(tc.prefix), max: tc.max}
			raw := strings.Join(tc.chunks, "")
			if err := f.run(&chunkReader{chunks: append([]string(nil), tc.chunks...)}); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(dst.writes, tc.want) {
				t.Errorf("writes %q, want %q", dst.writes, tc.want)
			}
			if file.String() != raw {
				t.Errorf("file got %q, want the raw bytes %q", file.String(), raw)
			}
		})
	}
}

// A line longer than the read buffer (64 KiB) but under max stays whole.
func TestForwarderLineLongerThanBuffer(t *testing.T) {
	var dst writeLog
	line := strings.Repeat("z", 200<<10) + "\n"
	if err := (forwarder{dst: &dst, max: MaxLine}).run(strings.NewReader(line + "next\n")); err != nil {
		t.Fatal(err)
	}
	if len(dst.writes) != 2 || dst.writes[0] != line || dst.writes[1] != "next\n" {
		t.Fatalf("got %d writes, first of %d bytes", len(dst.writes), len(dst.writes[0]))
	}
}

// A broken destination does not stop the reading (the rank would block on
// a full pipe); the first error is returned at the end.
func TestForwarderKeepsReadingAfterWriteError(t *testing.T) {
	dst := writeLog{fail: true}
	r := &chunkReader{chunks: []string{"a\n", "b\n", "c\n"}}
	err := (forwarder{dst: &dst, max: 8}).run(r)
	if err == nil || len(r.chunks) != 0 || len(dst.writes) != 3 {
		t.Fatalf("err %v, %d chunks unread, %d writes", err, len(r.chunks), len(dst.writes))
	}
}

func TestLockedIsIdempotent(t *testing.T) {
	var b bytes.Buffer
	l := Locked(&b)
	if Locked(l) != l {
		t.Fatal("Locked wrapped a LockedWriter again")
	}
	if _, err := l.Write([]byte("x")); err != nil || b.String() != "x" {
		t.Fatalf("write: %v, %q", err, b.String())
	}
}
