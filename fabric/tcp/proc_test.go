package tcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"flexlink/fabric"
	"flexlink/fabric/linktest"
	"flexlink/internal/errs"
)

// TestHelperProcess is the helper process of the two-process tests; run
// normally it does nothing.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(linktest.HelperEnv) != "tcp" {
		return
	}
	ep, err := NewEndpoint(config(os.Getenv("LINKTEST_JOB"), 1, nil))
	if err == nil {
		err = linktest.Serve(ep, 0, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// connectHelper starts a helper process as rank 1 and connects to it.
func connectHelper(t testing.TB) (*linktest.Proc, fabric.Link) {
	job := newJob()
	ep := newEndpoint(t, config(job, 0, nil))
	return linktest.ConnectHelper(t, ep, "TestHelperProcess", "tcp", "LINKTEST_JOB="+job)
}

func TestTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, p *linktest.Proc)
	}{
		{"PeerKilled", func(t *testing.T, p *linktest.Proc) { p.Cmd.Process.Signal(syscall.SIGKILL) }},
		{"PeerExits", func(t *testing.T, p *linktest.Proc) { p.Tell(t, "exit") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, l := connectHelper(t)
			for _, n := range []int{0, 1, 4097, 1<<20 + 3, 64<<20 + 3} {
				p.Echo(t, l, n)
			}
			r := l.Recv(linktest.TagOf(1<<30), make([]byte, 8))
			s := l.Send(linktest.TagOf(1<<30), make([]byte, 64<<20)) // more than the sockets buffer
			start := time.Now()
			tc.end(t, p)
			for _, req := range []fabric.Request{r, s} {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := req.Wait(ctx)
				expired := ctx.Err() != nil
				cancel()
				if expired {
					t.Fatal("request still pending 2 s after the peer went away")
				}
				t.Logf("peer loss noticed after %v: %v", time.Since(start), err)
				if !errors.Is(err, errs.ErrPeerLost) {
					t.Fatalf("error %v does not wrap ErrPeerLost", err)
				}
				for _, w := range []string{"rank 1", "host1", "127.0.0.1:", "tcp"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
			}
		})
	}
}
