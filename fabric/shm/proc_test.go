package shm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestHelperProcess is the helper process of the two-process tests; run
// normally it does nothing.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(linktest.HelperEnv) {
	case "shm":
		env := map[string]string{"FLEXLINK_SHM_CMA_BYTES": os.Getenv("LINKTEST_SHM_CMA")}
		linktest.ServeMain(NewEndpoint(config(os.Getenv("LINKTEST_JOB"), 1, env)))
	case "idle":
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
}

// jobTraces lists what of job is visible: entries in /dev/shm naming it
// and mappings of this process naming it.
func jobTraces(t *testing.T, job string) (files, maps []string) {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), job) {
			files = append(files, e.Name())
		}
	}
	m, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(m), "\n") {
		if strings.Contains(line, job) {
			maps = append(maps, line)
		}
	}
	return files, maps
}

// connectHelper starts a helper process as rank 1 and connects to it; cma
// is both sides' FLEXLINK_SHM_CMA_BYTES ("": the default).
func connectHelper(t testing.TB, job, cma string) (*linktest.Proc, fabric.Link) {
	ep, err := NewEndpoint(config(job, 0, map[string]string{"FLEXLINK_SHM_CMA_BYTES": cma}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return linktest.ConnectHelper(t, ep, "TestHelperProcess", "shm", "LINKTEST_JOB="+job, "LINKTEST_SHM_CMA="+cma)
}

func TestTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(p *linktest.Proc)
	}{
		{"PeerKilled", func(p *linktest.Proc) { p.Cmd.Process.Signal(syscall.SIGKILL) }},
		{"PeerExits", func(p *linktest.Proc) { p.Tell(t, "exit") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob()
			p, l := connectHelper(t, job, "65536")
			files, maps := jobTraces(t, job)
			if len(files) != 0 {
				t.Errorf("/dev/shm holds %v after connecting", files)
			}
			if len(maps) != 1 {
				t.Fatalf("want one mapping of the job's segment while connected, found %q", maps)
			}
			for _, n := range []int{0, 1, 4097, 1<<20 + 3, 64<<20 + 3} {
				p.Echo(t, l, n)
			}
			if got, want := pulled(l), uint64(1<<20+3+64<<20+3); got != want {
				t.Errorf("pulled %d bytes from the helper by single copy, want %d (the two large echoes)", got, want)
			}
			r := l.Recv(linktest.TagOf(1<<30), make([]byte, 8))
			start := time.Now()
			tc.end(p)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err := r.Wait(ctx)
			if ctx.Err() != nil {
				t.Fatal("pending receive still waits 2 s after the peer went away")
			}
			t.Logf("peer loss noticed after %v: %v", time.Since(start), err)
			want := []string{"rank 1", fmt.Sprintf("pid %d", p.Cmd.Process.Pid), "shm", "testhost"}
			for _, w := range want {
				if !strings.Contains(fmt.Sprint(err), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if !errors.Is(err, errs.ErrPeerLost) {
				t.Fatalf("error %v does not wrap ErrPeerLost", err)
			}
			l.Close()
			if files, maps := jobTraces(t, job); len(files)+len(maps) != 0 {
				t.Fatalf("after the peer went away and the link closed: /dev/shm %v, mappings %q", files, maps)
			}
		})
	}
}

// TestPeerProcessExitNoticed checks the liveness poll on its own: the
// control socket stays open, the closed flag stays clear, and only the
// peer process's exit (a killed child, not yet reaped) ends the wait.
func TestPeerProcessExitNoticed(t *testing.T) {
	p := linktest.StartHelper(t, "TestHelperProcess", "idle")
	fd, seg0, err := createSegment("flexlink-livetest", minRingBytes)
	if err != nil {
		t.Fatal(err)
	}
	seg1, err := mapSegment(fd, minRingBytes)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := socketPair(t)
	defer c1.Close()
	l0 := newLink(linkConfig{who: peerID{rank: 1, pid: p.Cmd.Process.Pid, host: "testhost"}, side: 0, seg: seg0, ctl: c0, log: config("x", 0, nil).Log()})
	defer l0.Close()
	l1 := newLink(linkConfig{who: peerID{rank: 0, pid: os.Getpid(), host: "testhost"}, side: 1, seg: seg1, ctl: c1, log: config("x", 0, nil).Log()})
	defer l1.Close()
	// The link works while the process runs.
	got := make([]byte, 3)
	r := l0.Recv(linktest.TagOf(1), got)
	linktest.AwaitOK(t, l1.Send(linktest.TagOf(1), []byte("abc")), "send")
	linktest.AwaitOK(t, r, "recv")
	r = l0.Recv(linktest.TagOf(2), got)
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = r.Wait(ctx)
	t.Logf("noticed after %v: %v", time.Since(start), err)
	if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "process exited") {
		t.Fatalf("receive from a killed peer process: %v, want ErrPeerLost saying the process exited", err)
	}
}

// socketPair returns the two ends of a SOCK_SEQPACKET socket pair.
func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	return conns[0], conns[1]
}
