package launcher

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The agent protocol runs over the stdin and stdout of the process that
// starts the agent (ssh or srun). Every frame is one text line
//
//	FLX1 KIND NODE RANK PAYLOAD\n
//
// with PAYLOAD in unpadded base64 (RawStdEncoding; "-" when empty). Lines
// survive what sits between flexrun and an agent: srun --label prefixes
// each line with "TASK: " and forwards stdin to every task (NODE says whom
// a frame is for; -1 is everyone), and a login shell may print a banner,
// which is not a frame and is passed on as a remark. A frame is at most
// maxFrameLine bytes, well below the line length srun forwards whole.
const frameMagic = "FLX1"

// agentProtocol is the version an agent and flexrun must share.
const agentProtocol = 2

// maxChunk is the most output bytes one frame carries; longer output is
// sent in several frames (flexrun rebuilds lines per rank).
const maxChunk = 3 << 10

// maxFrameLine bounds a frame line on reading: maxChunk in base64 plus the
// header, with room for JSON payloads (a spec with a large environment).
const maxFrameLine = 1 << 20

// Frame kinds. Head to agent: spec, go, sig, in, ineof, ping, bye.
// Agent to head: hello, ready, fail, start, out, err, exit, eof, ping,
// note, bye.
const (
	kSpec  = "spec"  // JSON agentSpec: what to run (NODE: the agent)
	kGo    = "go"    // start the ranks
	kSig   = "sig"   // payload: signal number; RANK -1: every rank
	kIn    = "in"    // stdin bytes for RANK
	kInEOF = "ineof" // end of RANK's stdin
	kPing  = "ping"  // liveness, both ways
	kBye   = "bye"   // head: tear down and exit; agent: all done, exiting
	kHello = "hello" // JSON agentHello
	kReady = "ready" // spec accepted: the program was found
	kFail  = "fail"  // payload: why this agent cannot go on
	kStart = "start" // payload: pid of RANK
	kOut   = "out"   // stdout bytes of RANK
	kErr   = "err"   // stderr bytes of RANK
	kExit  = "exit"  // payload: "PID code N" or "PID signal N" or "PID error TEXT"
	kEOF   = "eof"   // both output streams of RANK have ended
	kNote  = "note"  // payload: a message for flexrun's log
	kBind  = "bind"  // payload: a --report-bindings line for flexrun's stderr
)

// frame is one protocol message.
type frame struct {
	Kind string
	Node int // agent index; -1: every agent
	Rank int // -1 when not about one rank
	Data []byte
}

// appendFrame encodes f as one line.
func appendFrame(b []byte, f frame) []byte {
	b = append(b, frameMagic...)
	b = append(b, ' ')
	b = append(b, f.Kind...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(f.Node), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(f.Rank), 10)
	b = append(b, ' ')
	if len(f.Data) == 0 {
		b = append(b, '-')
	} else {
		b = base64.RawStdEncoding.AppendEncode(b, f.Data)
	}
	return append(b, '\n')
}

// errNotFrame marks a line that is not a frame (a banner, srun's own
// words); readers pass such lines on instead of failing.
var errNotFrame = errors.New("not an agent frame")

// parseFrame decodes one line (without its newline). With labelled set, a
// leading srun label "  3: " is skipped and returned as label (else -1).
func parseFrame(line string, labelled bool) (f frame, label int, err error) {
	label = -1
	if labelled {
		num, rest, ok := strings.Cut(strings.TrimLeft(line, " "), ": ")
		if n, err := strconv.Atoi(num); ok && err == nil && n >= 0 {
			label, line = n, rest
		}
	}
	fields := strings.Split(line, " ")
	if len(fields) != 5 || fields[0] != frameMagic {
		return f, label, errNotFrame
	}
	f.Kind = fields[1]
	node, err1 := strconv.Atoi(fields[2])
	rank, err2 := strconv.Atoi(fields[3])
	if err1 != nil || err2 != nil || f.Kind == "" {
		return f, label, fmt.Errorf("agent frame %.60q: bad header", line)
	}
	f.Node, f.Rank = node, rank
	if fields[4] != "-" {
		if f.Data, err = base64.RawStdEncoding.DecodeString(fields[4]); err != nil {
			return f, label, fmt.Errorf("agent frame %.60q: payload: %w", line, err)
		}
	}
	return f, label, nil
}

// frameReader reads frames from r line by line.
type frameReader struct {
	br       *bufio.Reader
	labelled bool
	// remark receives lines that are not frames (nil: dropped).
	remark func(label int, line string)
}

func newFrameReader(r io.Reader, labelled bool, remark func(int, string)) *frameReader {
	return &frameReader{br: bufio.NewReaderSize(r, 64<<10), labelled: labelled, remark: remark}
}

// next returns the next frame and the srun label it came with (-1 when
// none). It fails on end of input, on a line longer than maxFrameLine and
// on a malformed frame.
func (fr *frameReader) next() (frame, int, error) {
	for {
		line, err := fr.readLine()
		if err != nil {
			return frame{}, -1, err
		}
		f, label, err := parseFrame(line, fr.labelled)
		if errors.Is(err, errNotFrame) {
			if fr.remark != nil && strings.TrimSpace(line) != "" {
				fr.remark(label, line)
			}
			continue
		}
		return f, label, err
	}
}

func (fr *frameReader) readLine() (string, error) {
	var buf []byte
	for {
		chunk, err := fr.br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxFrameLine {
			return "", fmt.Errorf("agent stream: line longer than %d bytes", maxFrameLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		return strings.TrimRight(string(buf), "\r\n"), nil
	}
}

// frameWriter writes frames to w from a goroutine of its own, so that a
// stalled peer (a cut network fills ssh's buffers) never blocks the event
// loops that send control frames: send only queues. Output (sendChunks)
// waits while the queue is long, so a rank whose output cannot leave
// blocks on its own pipe, as it would locally. Safe for concurrent use.
type frameWriter struct {
	mu      sync.Mutex
	cond    *sync.Cond
	w       io.Writer
	queue   [][]byte
	writing bool // the writer holds frames taken from the queue
	err     error
	stopped bool
}

// maxQueued is the queue length past which output waits.
const maxQueued = 256

func newFrameWriter(w io.Writer) *frameWriter {
	fw := &frameWriter{w: w}
	fw.cond = sync.NewCond(&fw.mu)
	go fw.run()
	return fw
}

func (fw *frameWriter) run() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for {
		for len(fw.queue) == 0 && !fw.stopped {
			fw.cond.Wait()
		}
		if len(fw.queue) == 0 {
			return
		}
		batch := fw.queue
		fw.queue, fw.writing = nil, true
		fw.cond.Broadcast()
		fw.mu.Unlock()
		var err error
		for _, b := range batch {
			if _, err = fw.w.Write(b); err != nil {
				break
			}
		}
		fw.mu.Lock()
		fw.writing = false
		if err != nil && fw.err == nil {
			fw.err = err
		}
		if fw.err != nil {
			fw.queue = nil
		}
		fw.cond.Broadcast()
	}
}

// send queues f; it never waits. After a write error every send returns it.
func (fw *frameWriter) send(f frame) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err != nil {
		return fw.err
	}
	if fw.stopped {
		return io.ErrClosedPipe
	}
	fw.queue = append(fw.queue, appendFrame(nil, f))
	fw.cond.Broadcast()
	return nil
}

// sendChunks queues data as frames of kind for rank, maxChunk bytes each,
// waiting while more than maxQueued frames are queued.
func (fw *frameWriter) sendChunks(kind string, node, rank int, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), maxChunk)
		fw.mu.Lock()
		for len(fw.queue) >= maxQueued && fw.err == nil && !fw.stopped {
			fw.cond.Wait()
		}
		fw.mu.Unlock()
		if err := fw.send(frame{Kind: kind, Node: node, Rank: rank, Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// flush waits until everything queued has been written (or failed), at
// most d. It reports whether the queue emptied.
func (fw *frameWriter) flush(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		fw.mu.Lock()
		for (len(fw.queue) > 0 || fw.writing) && fw.err == nil {
			fw.cond.Wait()
		}
		fw.mu.Unlock()
		close(done)
	}()
	return closedWithin(done, d)
}

// closedWithin reports whether done is closed within d.
func closedWithin(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// stop ends the writer once the queue is written; later sends fail.
func (fw *frameWriter) stop() {
	fw.mu.Lock()
	fw.stopped = true
	fw.cond.Broadcast()
	fw.mu.Unlock()
}
