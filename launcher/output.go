package launcher

import (
	"bufio"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// MaxLine is the longest line forwarded whole; a longer line is forwarded
// in MaxLine-byte pieces, each ended with a newline, so memory stays
// bounded and two ranks still never share a line.
const MaxLine = 1 << 20

// LockedWriter serialises writes to w: one Write call lands whole, never
// interleaved with another. flexrun's stdout and stderr are wrapped in one
// so that forwarded lines and log lines stay apart.
type LockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Locked wraps w, or returns w when it is already a *LockedWriter.
func Locked(w io.Writer) *LockedWriter {
	if l, ok := w.(*LockedWriter); ok {
		return l
	}
	return &LockedWriter{w: w}
}

// Write writes p to the underlying writer while holding the lock.
func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// forwarder copies one output stream of one rank.
type forwarder struct {
	dst    io.Writer // shared destination; each line is one Write
	file   io.Writer // the rank's own copy (--output-dir), bytes as read; may be nil
	prefix []byte    // --tag-output prefix, e.g. "[3] "
	max    int       // MaxLine (smaller in tests)
	// stamp, when set, gives the time written before each line
	// (--timestamp-output, in StampLayout).
	stamp func() time.Time
}

// StampLayout is the time format of --timestamp-output: local time to the
// microsecond with its UTC offset, then a space, before any tag.
const StampLayout = "2006-01-02T15:04:05.000000Z07:00"

// tagPrefix is the --tag-output prefix of a rank's stream: "[3] " on
// stdout, "[3]<stderr> " on stderr.
func tagPrefix(rank, stream int) []byte {
	if stream == 1 {
		return []byte("[" + strconv.Itoa(rank) + "]<stderr> ")
	}
	return []byte("[" + strconv.Itoa(rank) + "] ")
}

// run reads r until end of file (or a read deadline set on it) and writes
// whole lines to f.dst. A final line without a newline gets one. Write
// errors do not stop the reading, so a rank never blocks on a full pipe
// because its destination broke; the first is returned.
func (f forwarder) run(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line, out []byte
	var werr error
	emit := func(b []byte, addNewline bool) {
		out = out[:0]
		if f.stamp != nil {
			out = append(f.stamp().AppendFormat(out, StampLayout), ' ')
		}
		out = append(append(out, f.prefix...), b...)
		if addNewline {
			out = append(out, '\n')
		}
		if _, err := f.dst.Write(out); err != nil && werr == nil {
			werr = err
		}
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if f.file != nil {
				if _, ferr := f.file.Write(chunk); ferr != nil && werr == nil {
					werr = ferr
				}
			}
			line = append(line, chunk...)
			for {
				n := len(line)
				if line[n-1] == '\n' {
					n--
				}
				if n <= f.max {
					break
				}
				emit(line[:f.max], true)
				line = append(line[:0], line[f.max:]...)
			}
			if len(line) > 0 && line[len(line)-1] == '\n' {
				emit(line, false)
				line = line[:0]
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(line) > 0 {
				emit(line, true)
			}
			if err == io.EOF || errors.Is(err, os.ErrDeadlineExceeded) {
				return werr
			}
			if werr == nil {
				werr = err
			}
			return werr
		}
	}
}
