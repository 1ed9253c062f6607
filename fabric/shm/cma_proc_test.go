package shm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestTwoProcessesSingleCopyKilled kills the helper process with SIGKILL
// while a large single-copy transfer is pending, on either side of it: the
// pending request must fail with ErrPeerLost, naming the peer, within 2 s.
func TestTwoProcessesSingleCopyKilled(t *testing.T) {
	const n = 64 << 20
	checkLoss := func(t *testing.T, p *linktest.Proc, r fabric.Request, what string) {
		t.Helper()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := r.Wait(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s still pending 2 s after the helper was killed", what)
		}
		t.Logf("%s failed after %v: %v", what, time.Since(start), err)
		if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", p.Cmd.Process.Pid)) {
			t.Fatalf("%s: %v, want ErrPeerLost naming the helper's pid", what, err)
		}
	}

	// The helper posts no receive: the parent's send waits for a pull that
	// never comes.
	t.Run("SendPending", func(t *testing.T) {
		p, l := connectHelper(t, newJob(), "65536")
		p.Echo(t, l, n)
		if pulled(l) != n {
			t.Fatalf("the echo came back with %d bytes pulled by single copy, want %d", pulled(l), n)
		}
		s := l.Send(linktest.TagOf(1<<30), linktest.Payload(1, n))
		p.Cmd.Process.Signal(syscall.SIGKILL)
		checkLoss(t, p, s, "pending single-copy send")
	})

	// The helper is killed after the parent pulled the first piece of the
	// echo: the next piece finds the process gone.
	t.Run("PullInterrupted", func(t *testing.T) {
		p, l := connectHelper(t, newJob(), "65536")
		killed := make(chan struct{})
		var once sync.Once
		l.(*link).in.pullHook = func(int) {
			once.Do(func() {
				killAndWait(t, p)
				close(killed)
			})
		}
		p.Tell(t, "echo %d", n)
		msg := linktest.Payload(2, n)
		r := l.Recv(linktest.TagOf(0), make([]byte, n))
		linktest.AwaitOK(t, l.Send(linktest.TagOf(0), msg), "send to the helper")
		select {
		case <-killed:
		case <-r.Done():
			t.Fatalf("the echo finished (%v) without a single-copy piece", r.Err())
		}
		checkLoss(t, p, r, "single-copy receive whose sender was killed")
		if got := pulled(l); got >= n {
			t.Fatalf("pulled all %d bytes from a killed process", got)
		}
	})
}

// killAndWait sends SIGKILL to the helper and returns once it has exited
// (its pidfd turns readable even before it is reaped).
func killAndWait(t *testing.T, p *linktest.Proc) {
	fd, err := unix.PidfdOpen(p.Cmd.Process.Pid, 0)
	if err != nil {
		t.Errorf("pidfd_open: %v", err)
		return
	}
	defer unix.Close(fd)
	p.Cmd.Process.Signal(syscall.SIGKILL)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 1 {
			t.Errorf("waiting for the killed helper to exit: %d, %v", n, err)
		}
		return
	}
}
