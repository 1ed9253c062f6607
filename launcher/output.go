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
	mu  sync.Mutex
	w   io.Writer
	err error // the first write error (a full disk, a closed pipe)
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
	n, err := l.w.Write(p)
	if err != nil && l.err == nil {
		l.err = err
	}
	return n, err
}

// Err is the first error a write returned, nil while none failed: output
// was lost, and flexrun says so and fails as coreutils do.
func (l *LockedWriter) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// forwarder copies one output stream of one rank.
type forwarder struct {
	dst    io.Writer // shared destination; each line is one Write
	file   io.Writer // the rank's own copy (--output-dir), bytes as read; may be nil
	prefix []byte    // written before each line (after any stamp): see outputPrefix
	max    int       // MaxLine (smaller in tests)
	// stamp, when set, gives the time written before each line
	// (--timestamp-output, in StampLayout).
	stamp func() time.Time
}

// StampLayout is the time format of --timestamp-output: OpenMPI's, the
// C library's ctime() without its newline ("Tue Nov 24 14:20:40 2026"),
// local time, with nothing between it and the tag that follows.
const StampLayout = time.ANSIC

// outputJobID is the job number in OpenMPI's tags ("[1,R]") and in
// --output-filename's DIR/1/: a flexrun runs one job.
const outputJobID = "1"

// streamName is the stream word of OpenMPI's tags: stream 0 "stdout",
// 1 "stderr".
func streamName(stream int) string {
	if stream == 1 {
		return "stderr"
	}
	return "stdout"
}

// outputPrefix is what goes before each line of a rank's stream after
// any timestamp, exactly as OpenMPI 4.1's mpirun writes it:
// --tag-output "[1,R]<stdout>:" (or <stderr>), --timestamp-output alone
// "<stdout>:", neither nothing. There is no space before the line.
func outputPrefix(rank, stream int, tag, stamp bool) []byte {
	switch {
	case tag:
		return []byte("[" + outputJobID + "," + strconv.Itoa(rank) + "]<" + streamName(stream) + ">:")
	case stamp:
		return []byte("<" + streamName(stream) + ">:")
	}
	return nil
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
			out = f.stamp().AppendFormat(out, StampLayout)
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
