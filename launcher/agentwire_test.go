package launcher

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []frame{
		{Kind: kHello, Node: 0, Rank: -1, Data: []byte(`{"protocol":1}`)},
		{Kind: kOut, Node: 12, Rank: 7, Data: []byte("line one\nline two without end")},
		{Kind: kPing, Node: -1, Rank: -1},
		{Kind: kErr, Node: 1, Rank: 3, Data: []byte{0, 1, 2, 0xff, '\n', ' '}},
	}
	var b []byte
	for _, f := range frames {
		b = appendFrame(b, f)
	}
	if n := bytes.Count(b, []byte("\n")); n != len(frames) {
		t.Fatalf("%d lines for %d frames:\n%s", n, len(frames), b)
	}
	fr := newFrameReader(bytes.NewReader(b), false, nil)
	for i, want := range frames {
		got, label, err := fr.next()
		if err != nil || label != -1 {
			t.Fatalf("frame %d: %v (label %d)", i, err, label)
		}
		if len(want.Data) == 0 {
			want.Data = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("frame %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, _, err := fr.next(); err != io.EOF {
		t.Errorf("after the last frame: %v, want EOF", err)
	}
}

func TestParseFrame(t *testing.T) {
	tests := []struct {
		name     string
		line     string
		labelled bool
		want     frame
		label    int
		wantErr  string
	}{
		{"plain", "FLX1 exit 0 3 MTIgY29kZSAw", false, frame{Kind: kExit, Node: 0, Rank: 3, Data: []byte("12 code 0")}, -1, ""},
		{"srun label", "  2: FLX1 ping 2 -1 -", true, frame{Kind: kPing, Node: 2, Rank: -1}, 2, ""},
		{"label not expected", "2: FLX1 ping 2 -1 -", false, frame{}, -1, errNotFrame.Error()},
		{"banner", "Welcome to node7!", false, frame{}, -1, errNotFrame.Error()},
		{"labelled banner", "0: Welcome", true, frame{}, 0, errNotFrame.Error()},
		{"other version", "FLX2 ping 0 0 -", false, frame{}, -1, errNotFrame.Error()},
		{"bad node", "FLX1 ping x 0 -", false, frame{}, -1, "bad header"},
		{"bad payload", "FLX1 out 0 0 !!!", false, frame{}, -1, "payload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, label, err := parseFrame(tc.line, tc.labelled)
			testenv.WantErr(t, err, tc.wantErr)
			if label != tc.label {
				t.Errorf("label %d, want %d", label, tc.label)
			}
			if tc.wantErr == "" && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A login banner between frames is passed to remark, not taken for a frame.
func TestFrameReaderRemarks(t *testing.T) {
	in := "Last login: never\n" + string(appendFrame(nil, frame{Kind: kReady, Node: 0, Rank: -1})) + "\n"
	var remarks []string
	fr := newFrameReader(strings.NewReader(in), false, func(_ int, l string) { remarks = append(remarks, l) })
	f, _, err := fr.next()
	if err != nil || f.Kind != kReady {
		t.Fatalf("got %+v, %v; want the ready frame", f, err)
	}
	if _, _, err := fr.next(); err != io.EOF {
		t.Fatalf("got %v, want EOF", err)
	}
	if !reflect.DeepEqual(remarks, []string{"Last login: never"}) {
		t.Errorf("remarks %q", remarks)
	}
}

func TestFrameReaderLimits(t *testing.T) {
	long := strings.Repeat("x", maxFrameLine+10) + "\n"
	if _, _, err := newFrameReader(strings.NewReader(long), false, nil).next(); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long line: %v", err)
	}
	if _, _, err := newFrameReader(strings.NewReader("FLX1 ping 0"), false, nil).next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v, want ErrUnexpectedEOF", err)
	}
}

func TestSendChunks(t *testing.T) {
	var b bytes.Buffer
	data := bytes.Repeat([]byte("abcdefg\n"), maxChunk/4) // two chunks
	fw := newFrameWriter(&b)
	if err := fw.sendChunks(kOut, 1, 5, data); err != nil {
		t.Fatal(err)
	}
	if !fw.flush(5 * time.Second) {
		t.Fatal("not written within 5 s")
	}
	fr := newFrameReader(&b, false, nil)
	var got []byte
	n := 0
	for {
		f, _, err := fr.next()
		if err == io.EOF {
			break
		}
		if err != nil || f.Kind != kOut || f.Rank != 5 || f.Node != 1 || len(f.Data) > maxChunk {
			t.Fatalf("frame %+v, %v", f, err)
		}
		got = append(got, f.Data...)
		n++
	}
	if n != 2 || !bytes.Equal(got, data) {
		t.Errorf("%d frames, %d bytes; want 2 frames carrying the %d bytes", n, len(got), len(data))
	}
}

// blockedWriter blocks every Write until release is closed (a peer whose
// network is cut), then records what it is given.
type blockedWriter struct {
	release chan struct{}
	buf     *bytes.Buffer
}

func (w blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.buf.Write(p)
}

// A stalled peer never blocks send (event loops call it), and what was
// queued arrives in order once the peer reads again.
func TestFrameWriterStalledPeer(t *testing.T) {
	w := blockedWriter{release: make(chan struct{}), buf: &bytes.Buffer{}}
	fw := newFrameWriter(w)
	for i := range 2 * maxQueued {
		if err := fw.send(frame{Kind: kPing, Node: i, Rank: -1}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- fw.sendChunks(kOut, 0, 1, bytes.Repeat([]byte("x"), 3*maxChunk)) }()
	close(w.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !fw.flush(10 * time.Second) {
		t.Fatal("queue not written within 10 s")
	}
	fr := newFrameReader(w.buf, false, nil)
	for i := range 2*maxQueued + 3 {
		f, _, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if i < 2*maxQueued && (f.Kind != kPing || f.Node != i) || i >= 2*maxQueued && f.Kind != kOut {
			t.Fatalf("frame %d: %+v out of order", i, f)
		}
	}
	fw.stop()
	if err := fw.send(frame{Kind: kPing}); err == nil {
		t.Error("send after stop succeeded")
	}
}
