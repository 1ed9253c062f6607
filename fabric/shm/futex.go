package shm

import (
	"errors"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futexes on the shared mapping: no FUTEX_PRIVATE_FLAG, so a waiter in one
// process is woken by the other.
const (
	opFutexWait = 0
	opFutexWake = 1
)

// futexWait sleeps while *w == val, at most d. Spurious returns are fine:
// callers re-check their condition.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opFutexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every waiter on w.
func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opFutexWake, uintptr(1<<31-1), 0, 0, 0)
}

// procWatch tells whether a peer process still runs. It holds a pidfd
// (immune to pid reuse; it also reports a killed child that is not reaped
// yet as gone). A peer in this very process is always alive: its end of the
// link is watched through the closed flag and the control socket instead.
type procWatch struct {
	pid   int
	pidfd int // -1: none
}

func watchProc(pid int) *procWatch {
	w := &procWatch{pid: pid, pidfd: -1}
	if pid <= 0 || pid == os.Getpid() {
		return w
	}
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		w.pidfd = fd
	}
	return w
}

// alive reports false once the process has exited.
func (w *procWatch) alive() bool {
	switch {
	case w.pid <= 0 || w.pid == os.Getpid():
		return true
	case w.pidfd >= 0:
		fds := []unix.PollFd{{Fd: int32(w.pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err != nil || n == 0
	default:
		return !errors.Is(unix.Kill(w.pid, 0), unix.ESRCH)
	}
}

func (w *procWatch) close() {
	if w.pidfd >= 0 {
		unix.Close(w.pidfd)
		w.pidfd = -1
	}
}
