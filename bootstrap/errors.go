package bootstrap

import (
	"context"
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/internal/errs"
)

// ErrServerLost is wrapped (with errs.ErrPeerLost) by a store's error
// when its connection to the server ended without a word from the server
// (the server's process ended, or the network to it): unlike a failure
// the server announced, it says nothing of the ranks. (flexlink's libnccl
// serves the store from rank 0's process: rank 0 ending after its last
// collective, as a script without ncclCommDestroy does, loses the server
// while the others still finish that collective, whose data they have.)
var ErrServerLost = errors.New("bootstrap server lost")

// class is an error's sentinel class as it travels on the wire, so that a
// remote rank's error wraps the same sentinel as the original.
type class uint8

const (
	classAborted      class = iota + 1 // errs.ErrAborted (anything unclassified)
	classMismatch                      // errs.ErrMismatch
	classPeerLost                      // errs.ErrPeerLost
	classTimeout                       // errs.ErrTimeout
	classAuth                          // errs.ErrAuth
	classClosed                        // errs.ErrClosed
	classNotSupported                  // errs.ErrNotSupported
	classLast
)

func (c class) valid() bool { return c >= classAborted && c < classLast }

func (c class) sentinel() error {
	switch c {
	case classMismatch:
		return errs.ErrMismatch
	case classPeerLost:
		return errs.ErrPeerLost
	case classTimeout:
		return errs.ErrTimeout
	case classAuth:
		return errs.ErrAuth
	case classClosed:
		return errs.ErrClosed
	case classNotSupported:
		return errs.ErrNotSupported
	}
	return errs.ErrAborted
}

// classOf picks err's class; for errors wrapping several sentinels the
// first class in the order of the constants decides.
func classOf(err error) class {
	for c := classMismatch; c < classLast; c++ {
		if errors.Is(err, c.sentinel()) {
			return c
		}
	}
	return classAborted
}

// wireError is an error rebuilt from its class and text; errors.Is matches
// the class's sentinel (and errs.ErrAborted when the job was aborted).
type wireError struct {
	msg     string
	wrapped []error
}

func (e *wireError) Error() string   { return e.msg }
func (e *wireError) Unwrap() []error { return e.wrapped }

func newWireError(c class, msg string) error {
	return &wireError{msg: msg, wrapped: []error{c.sentinel()}}
}

// failure describes why a job failed: an abort by a rank (or the launcher,
// Rank -1), or something the engine detected (a lost rank, mismatched
// collectives).
type failure struct {
	Class    class
	Rank     int // aborting rank, -1: the launcher
	Text     string
	Detected bool // found by the engine; Text says what and who
}

// err renders the failure as the error a rank's calls return.
func (f failure) err() error {
	if f.Detected {
		return newWireError(f.Class, "bootstrap: "+f.Text)
	}
	who := "the launcher"
	if f.Rank >= 0 {
		who = fmt.Sprintf("rank %d", f.Rank)
	}
	e := &wireError{
		msg:     fmt.Sprintf("bootstrap: job aborted by %s: %s", who, f.Text),
		wrapped: []error{f.Class.sentinel()},
	}
	if f.Class != classAborted {
		e.wrapped = append(e.wrapped, errs.ErrAborted)
	}
	return e
}

func (f failure) msg() abortMsg {
	r := int32(f.Rank)
	if f.Detected {
		r = rankDetected
	}
	return abortMsg{Class: f.Class, Rank: r, Text: truncate(f.Text, maxTextLen)}
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func failureFromAbort(m abortMsg) failure {
	if m.Rank == rankDetected {
		return failure{Class: m.Class, Rank: -1, Text: m.Text, Detected: true}
	}
	return failure{Class: m.Class, Rank: int(m.Rank), Text: m.Text}
}

// Abort frames name the aborting rank, rankLauncher, or rankDetected when
// the server itself found the failure (a lost rank, mismatched
// collectives; the text says who).
const (
	rankLauncher = -1
	rankDetected = -2
)

// ctxError wraps ctx's error; a passed deadline also wraps errs.ErrTimeout.
func ctxError(ctx context.Context, what string) error {
	err := context.Cause(ctx)
	if err == nil {
		err = ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w (%w)", what, errs.ErrTimeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
