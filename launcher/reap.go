package launcher

import (
	"errors"
	"os/exec"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper waits for a host's ranks and reports their exits in the order the
// kernel finished them. One goroutine waits with epoll on a pidfd per
// rank: epoll's ready list keeps the order in which the pidfds became
// readable, which is the order in which the processes' last threads were
// gone. A Wait goroutine per rank would report in whatever order the
// scheduler runs those goroutines, which on a loaded machine often puts a
// rank that failed because its peer died ahead of the peer.
//
// The kernel's order is not the order of the causes either: a dying
// process closes its sockets (its peers notice at once) some time before
// its last thread is gone, and on a busy machine that can be milliseconds,
// in which a peer may fail and end first. judge therefore weighs more than
// this order (see judge).
//
// Ranks are added before start; start reports each added rank's exit on
// exits exactly once, in that order. Where pidfds or epoll are missing
// (kernels before 5.3) each rank gets a Wait goroutine instead.
type reaper struct {
	exits  chan<- rankExit
	epfd   int // -1: no epoll; every rank waited for by its own goroutine
	wakefd int // eventfd that stop writes to end the goroutine
	procs  map[int32]reaped

	mu     sync.Mutex    // orders stop's write with the loop's closing of wakefd
	closed bool          // epfd and wakefd are closed
	done   chan struct{} // closed when the loop has ended
}

// reaped is one rank the reaper waits for.
type reaped struct {
	rank  int // the index that rankExit.rank carries
	cmd   *exec.Cmd
	pidfd int
}

func newReaper(exits chan<- rankExit) *reaper {
	r := &reaper{exits: exits, epfd: -1, wakefd: -1, procs: map[int32]reaped{}, done: make(chan struct{})}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return r
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return r
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return r
	}
	r.epfd, r.wakefd = epfd, wakefd
	return r
}

// add waits for cmd's process (started, not yet waited for).
func (r *reaper) add(rank int, cmd *exec.Cmd) {
	if r.epfd >= 0 {
		fd, err := unix.PidfdOpen(cmd.Process.Pid, unix.PIDFD_NONBLOCK)
		if err == nil {
			err = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
			if err == nil {
				r.procs[int32(fd)] = reaped{rank: rank, cmd: cmd, pidfd: fd}
				return
			}
			unix.Close(fd)
		}
	}
	go r.wait(reaped{rank: rank, cmd: cmd, pidfd: -1})
}

func (r *reaper) wait(p reaped) {
	err := p.cmd.Wait()
	r.exits <- rankExit{rank: p.rank, state: p.cmd.ProcessState, err: err}
}

// start reports the added ranks' exits from now on.
func (r *reaper) start() {
	if r.epfd < 0 {
		return
	}
	go r.loop()
}

// stop ends the reaper's goroutine (ranks not reaped by then are not
// reported); it is a no-op once every rank has been reported.
func (r *reaper) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wakefd >= 0 && !r.closed {
		_, _ = unix.Write(r.wakefd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}
}

func (r *reaper) loop() {
	defer func() {
		for fd := range r.procs {
			unix.Close(int(fd))
		}
		r.mu.Lock()
		r.closed = true
		unix.Close(r.epfd)
		unix.Close(r.wakefd)
		r.mu.Unlock()
		close(r.done)
	}()
	events := make([]unix.EpollEvent, 16)
	for len(r.procs) > 0 {
		n, err := unix.EpollWait(r.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// Cannot happen with a valid epfd; do not lose the ranks.
			for fd, p := range r.procs {
				delete(r.procs, fd)
				unix.Close(int(fd))
				go r.wait(p)
			}
			return
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == r.wakefd {
				return
			}
			p, ok := r.procs[ev.Fd]
			if !ok {
				continue
			}
			delete(r.procs, ev.Fd)
			_ = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, p.pidfd, nil)
			unix.Close(p.pidfd)
			r.wait(p) // the process has exited: Wait returns at once
		}
	}
}
