// Package pause sleeps for short times precisely. A Go timer under a
// millisecond (time.Sleep, time.After) sleeps a whole millisecond when the
// process is otherwise idle: the runtime's poller waits in milliseconds.
// Polling loops that back off by tens of microseconds then add a
// millisecond to every wait (measured: 1.1 ms on a 250 µs GPU call,
// docs/PERF.md). For
// now Sleep blocks the calling OS thread in nanosleep below a millisecond,
// which the runtime handles as any system call.
package pause

import (
	"syscall"
	"time"
)

// Sleep pauses the calling goroutine for about d.
func Sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	if d >= time.Millisecond {
		time.Sleep(d)
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR: a shorter pause, which every caller tolerates
}
