package linktest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
)

// Two-process tests re-execute the test binary as a helper process (the
// os/exec TestHelperProcess pattern): the helper makes the other endpoint,
// and parent and helper trade addresses and commands as text lines over
// the helper's stdin and stdout, while the data moves over the link.
//
// Commands the helper serves (see Serve):
//
//	echo N [COUNT]  COUNT times (default 1): receive an N-byte message and
//	                send it back
//	sink N COUNT    receive COUNT N-byte messages, then answer "ok"
//	exit            close the link and exit
//
// Anything else is answered with "error ...".

// HelperEnv is the environment variable that marks a helper process; its
// value names the transport.
const HelperEnv = "LINKTEST_HELPER"

// Proc is a running helper process.
type Proc struct {
	Cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	seq   int // tag sequence of the messages exchanged with the helper
}

// StartHelper starts this test binary running only the test named test,
// with HelperEnv=transport and extra environment variables. The process is
// killed when t ends.
func StartHelper(t testing.TB, test, transport string, env ...string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v=false")
	cmd.Env = append(append(os.Environ(), HelperEnv+"="+transport), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper process: %v", err)
	}
	p := &Proc{Cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return p
}

// Tell writes one command line to the helper.
func (p *Proc) Tell(t testing.TB, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Fprintf(p.in, format+"\n", args...); err != nil {
		t.Fatalf("write to helper: %v", err)
	}
}

// Expect reads the helper's next line, which must start with prefix, and
// returns the rest of it.
func (p *Proc) Expect(t testing.TB, prefix string) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatalf("helper exited while %q was expected", prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("helper said %q, expected %q", line, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(line, prefix))
	case <-time.After(opTimeout):
		t.Fatalf("helper did not say %q within %v", prefix, opTimeout)
	}
	return ""
}

// ServeMain is a helper process's whole life: Serve ep (made with err;
// peer rank 0) on stdin and stdout, then exit, with status 1 and the
// error on stderr when making or serving it failed.
func ServeMain(ep fabric.Endpoint, err error) {
	if err == nil {
		err = Serve(ep, 0, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Serve runs a helper's side: it prints "addr <hex address>", reads the
// parent's "addr" line, connects to rank peer, prints "ready", and serves
// commands until "exit" or end of input.
func Serve(ep fabric.Endpoint, peer int, in io.Reader, out io.Writer) error {
	fmt.Fprintf(out, "addr %x\n", ep.Address())
	s := bufio.NewScanner(in)
	if !s.Scan() {
		return fmt.Errorf("no address from the parent: %v", s.Err())
	}
	var addr []byte
	if _, err := fmt.Sscanf(s.Text(), "addr %x", &addr); err != nil {
		return fmt.Errorf("parent line %q: %w", s.Text(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	l, err := ep.Connect(ctx, peer, addr)
	cancel()
	if err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return err
	}
	defer l.Close()
	fmt.Fprintln(out, "ready")
	seq := 0
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 1 && f[0] == "exit" {
			return nil
		}
		err := serveOne(l, f, &seq)
		if err != nil {
			fmt.Fprintf(out, "error %v\n", err)
		} else {
			fmt.Fprintln(out, "ok")
		}
	}
	return s.Err()
}

func serveOne(l fabric.Link, f []string, seq *int) error {
	nums := make([]int, len(f)-1)
	for i := range nums {
		n, err := strconv.Atoi(f[i+1])
		if err != nil {
			return fmt.Errorf("command %q: %w", f, err)
		}
		nums[i] = n
	}
	ctx := context.Background()
	switch {
	case (len(f) == 2 || len(f) == 3) && f[0] == "echo":
		buf := make([]byte, nums[0])
		count := 1
		if len(f) == 3 {
			count = nums[1]
		}
		for range count {
			tag := TagOf(*seq)
			*seq++
			if err := l.Recv(tag, buf).Wait(ctx); err != nil {
				return err
			}
			if err := l.Send(tag, buf).Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	case len(f) == 3 && f[0] == "sink":
		bufs := [2][]byte{make([]byte, nums[0]), make([]byte, nums[0])}
		var prev fabric.Request
		for i := range nums[1] {
			r := l.Recv(TagOf(*seq), bufs[i%2])
			*seq++
			if prev != nil {
				if err := prev.Wait(ctx); err != nil {
					return err
				}
			}
			prev = r
		}
		if prev != nil {
			return prev.Wait(ctx)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", f)
}

// Echo has the helper echo one size-byte message over l and checks that
// the same bytes came back.
func (p *Proc) Echo(t testing.TB, l fabric.Link, size int) {
	t.Helper()
	p.Tell(t, "echo %d", size)
	tag := TagOf(p.seq)
	msg, got := Payload(uint64(p.seq), size), make([]byte, size)
	p.seq++
	r := l.Recv(tag, got)
	AwaitOK(t, l.Send(tag, msg), fmt.Sprintf("send %d bytes to the helper", size))
	AwaitOK(t, r, fmt.Sprintf("receive %d bytes back from the helper", size))
	checkData(t, "echoed message", got, msg)
	p.Expect(t, "ok")
}

// Sink sends count size-byte messages to the helper over l, keeping up to
// window in flight, and returns the time until the helper had them all.
func (p *Proc) Sink(t testing.TB, l fabric.Link, size, count, window int) time.Duration {
	t.Helper()
	msg := Payload(1, size)
	p.Tell(t, "sink %d %d", size, count)
	start := time.Now()
	var inflight []fabric.Request
	for range count {
		if len(inflight) == window {
			AwaitOK(t, inflight[0], "send to the helper")
			inflight = inflight[1:]
		}
		inflight = append(inflight, l.Send(TagOf(p.seq), msg))
		p.seq++
	}
	for _, r := range inflight {
		AwaitOK(t, r, "send to the helper")
	}
	p.Expect(t, "ok")
	return time.Since(start)
}

// PingPong has the helper echo count size-byte messages one at a time and
// returns the mean one-way time (half the round trip).
func (p *Proc) PingPong(t testing.TB, l fabric.Link, size, count int) time.Duration {
	t.Helper()
	p.Tell(t, "echo %d %d", size, count)
	msg, got := Payload(3, size), make([]byte, size)
	ctx := context.Background()
	start := time.Now()
	for range count {
		tag := TagOf(p.seq)
		p.seq++
		r := l.Recv(tag, got)
		if err := fabric.WaitAll(ctx, l.Send(tag, msg), r); err != nil {
			t.Fatalf("ping-pong with the helper: %v", err)
		}
	}
	d := time.Since(start)
	checkData(t, "echoed message", got, msg)
	p.Expect(t, "ok")
	return d / time.Duration(2*max(count, 1))
}

// SuiteFails reruns this test binary on the tests that run selects
// (-test.run) with env (NAME=value) added, and fails t unless that run
// fails, in the test named fails ("--- FAIL: " fails). what names what
// the rerun tested, for the message: the self-tests of the suites show
// they catch a broken link or provider this way.
func SuiteFails(t *testing.T, run, env, fails, what string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.v")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed %s:\n%s", what, out)
	}
	if want := "--- FAIL: " + fails; !strings.Contains(string(out), want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
}
