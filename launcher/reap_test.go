package launcher

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReaper: every added process is reported once with its status, in
// the order the processes ended, whether it ended before start or after.
func TestReaper(t *testing.T) {
	exits := make(chan rankExit, 3)
	r := newReaper(exits)
	if r.epfd < 0 {
		t.Fatal("no epoll or eventfd") // both exist on every supported kernel
	}
	procs := []*exec.Cmd{exec.Command("sleep", "30"), exec.Command("sh", "-c", "exit 3"), exec.Command("sleep", "30")}
	for i, c := range procs {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		r.add(i, c)
	}
	defer func() {
		for _, c := range procs {
			_ = c.Process.Kill()
		}
	}()
	// Process 1 has ended (a zombie, not reaped) before the reaper starts.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, procs[1].Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	r.start()
	next := func() rankExit {
		select {
		case ex := <-exits:
			return ex
		case <-time.After(10 * time.Second):
			t.Fatal("no exit reported in 10 s")
		}
		return rankExit{}
	}
	if ex := next(); ex.rank != 1 || ex.state.ExitCode() != 3 {
		t.Fatalf("first report: rank %d, %v; want rank 1, exit status 3", ex.rank, ex.state)
	}
	for _, i := range []int{2, 0} {
		if err := procs[i].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ex := next()
		if ws, _ := ex.state.Sys().(syscall.WaitStatus); ex.rank != i || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("report: rank %d, %v; want rank %d killed by SIGKILL", ex.rank, ex.state, i)
		}
	}
	r.stop() // after the loop has ended: a no-op
	select {
	case ex := <-exits:
		t.Errorf("extra report %+v", ex)
	default:
	}
}

// TestReaperStop: stop ends the loop while ranks still run.
func TestReaperStop(t *testing.T) {
	exits := make(chan rankExit, 1)
	r := newReaper(exits)
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	r.add(0, c)
	r.start()
	r.stop()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end in 10 s")
	}
}
