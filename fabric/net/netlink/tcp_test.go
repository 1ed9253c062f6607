package netlink_test

// The host TCP link (NewTCPEndpoint): the guarantees the older fabric/tcp
// link's tests gave, now over the tcp provider.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/net/netlink"
	"github.com/flexlink/flexlink/internal/errs"
)

func newJob() string { return linktest.NewJob("tcptest") }

// config makes rank's endpoint config on loopback; env adds settings.
func config(job string, rank int, env map[string]string) fabric.EndpointConfig {
	m := map[string]string{"FLEXLINK_SOCKET_IFNAME": "lo"}
	for k, v := range env {
		m[k] = v
	}
	return linktest.EndpointConfig(job, rank, fmt.Sprintf("host%d", rank), m)
}

func tcpEndpoint(t testing.TB, cfg fabric.EndpointConfig) fabric.Endpoint {
	t.Helper()
	e, err := netlink.NewTCPEndpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func tcpPair(t testing.TB, env map[string]string) (a, b fabric.Link) {
	t.Helper()
	job := newJob()
	return linktest.ConnectPair(t, tcpEndpoint(t, config(job, 0, env)), tcpEndpoint(t, config(job, 1, env)))
}

func TestTCPConformance(t *testing.T) {
	for _, socks := range []string{"1", "2", "3"} {
		t.Run("sockets="+socks, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
				return tcpPair(t, map[string]string{"FLEXLINK_SOCKETS_PER_PEER": socks})
			})
		})
	}
}

func TestTCPProps(t *testing.T) {
	a, b := tcpPair(t, nil)
	defer a.Close()
	defer b.Close()
	p := a.Props()
	if p.Kind != fabric.KindTCP || p.Bandwidth <= 0 || p.Latency <= 0 || !strings.Contains(p.Desc, "host1") {
		t.Fatalf("props %+v: want kind tcp, a nominal bandwidth and latency, the peer's host in the description", p)
	}
}

func TestTCPBadSettings(t *testing.T) {
	for _, env := range []map[string]string{
		{"FLEXLINK_SOCKETS_PER_PEER": "0"},
		{"FLEXLINK_SOCKETS_PER_PEER": "17"},
		{"FLEXLINK_SOCKETS_PER_PEER": "two"},
		{"FLEXLINK_SOCKET_TIMEOUT": "-1s"},
		{"FLEXLINK_SOCKET_IFNAME": "=no-such-interface"},
	} {
		cfg := config("j", 0, env)
		if e, err := netlink.NewTCPEndpoint(cfg); err == nil {
			e.Close()
			t.Errorf("NewTCPEndpoint with %v succeeded", env)
		}
	}
	cfg := config("j", 0, nil)
	cfg.Secret = nil
	if e, err := netlink.NewTCPEndpoint(cfg); err == nil {
		e.Close()
		t.Error("NewTCPEndpoint without a job secret succeeded")
	}
}

// TestTCPWrongSecret: a rank without the job's secret is dropped by the
// listener, its Connect fails (naming the refused hello), the listener
// logs the drop, and no link is made either way.
func TestTCPWrongSecret(t *testing.T) {
	job := newJob()
	var logs linktest.LogBuffer
	cfg1 := config(job, 1, nil)
	cfg1.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	e1 := tcpEndpoint(t, cfg1)
	cfg0 := config(job, 0, nil)
	cfg0.Secret = []byte("not the secret")
	e0 := tcpEndpoint(t, cfg0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e0.Connect(ctx, 1, e1.Address())
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("connect with a wrong secret: %v, want the refused hello", err)
	}
	// The rank with the right secret gets no link either: the other side
	// refuses its hello, or it waits until its context ends.
	ctx1, cancel1 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel1()
	if l, err := e1.Connect(ctx1, 0, e0.Address()); err == nil {
		t.Fatalf("listener's connect made link %v with a rank that does not hold the secret", l)
	}
	if !strings.Contains(logs.String(), "dropped a connection") || !strings.Contains(logs.String(), errs.ErrAuth.Error()) {
		t.Errorf("listener logged %q, want a dropped connection for authentication", logs.String())
	}
}

// TestTCPCommunicatorsApart connects the same two ranks in two
// communicators at once: each link carries only its own communicator's
// messages, and an address of one communicator does not connect the other.
func TestTCPCommunicatorsApart(t *testing.T) {
	job := newJob()
	eps := map[string][2]fabric.Endpoint{}
	for _, comm := range []string{"dp", "tp"} {
		var pair [2]fabric.Endpoint
		for r := range pair {
			cfg := config(job, r, nil)
			cfg.Comm = comm
			pair[r] = tcpEndpoint(t, cfg)
		}
		eps[comm] = pair
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := eps["dp"][0].Connect(ctx, 1, eps["tp"][1].Address()); err == nil {
		t.Fatal("dp endpoint connected to tp's address")
	}
	links := map[string][2]fabric.Link{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, comm := range []string{"dp", "tp"} {
		cfgs := [2]fabric.EndpointConfig{config(job, 0, nil), config(job, 1, nil)}
		cfgs[0].Comm, cfgs[1].Comm = comm, comm
		e0, e1 := tcpEndpoint(t, cfgs[0]), tcpEndpoint(t, cfgs[1])
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, b := linktest.ConnectPair(t, e0, e1)
			mu.Lock()
			links[comm] = [2]fabric.Link{a, b}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for comm, l := range links {
		defer l[0].Close()
		defer l[1].Close()
		msg := []byte("for " + comm)
		got := make([]byte, len(msg))
		r := l[1].Recv(linktest.TagOf(0), got)
		linktest.AwaitOK(t, l[0].Send(linktest.TagOf(0), msg), "send on "+comm)
		linktest.AwaitOK(t, r, "recv on "+comm)
		if !bytes.Equal(got, msg) {
			t.Errorf("%s link delivered %q, want %q", comm, got, msg)
		}
	}
}

// TestTCPAbortMidTransfer: receives in flight over several sockets end
// when either side aborts the link, whichever socket their parts were on.
func TestTCPAbortMidTransfer(t *testing.T) {
	for _, side := range []string{"receiver", "sender"} {
		t.Run(side, func(t *testing.T) {
			for i := 0; i < 20; i++ {
				a, b := tcpPair(t, map[string]string{"FLEXLINK_SOCKETS_PER_PEER": "2"})
				buf := make([]byte, 8<<20)
				tag := fabric.Tag{1}
				for k := 0; k < 3; k++ {
					a.Send(tag, buf)
				}
				rs := []fabric.Request{b.Recv(tag, make([]byte, len(buf))), b.Recv(tag, make([]byte, len(buf))), b.Recv(tag, make([]byte, len(buf)))}
				cause := errors.New("test abort")
				if side == "receiver" {
					b.Abort(cause)
				} else {
					a.Abort(cause)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				for k, r := range rs {
					err := r.Wait(ctx)
					if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errs.ErrTimeout) {
						t.Fatalf("round %d: receive %d still pending 10 s after the abort: %v", i, k, err)
					}
					if err != nil && !errors.Is(err, cause) && !errors.Is(err, errs.ErrPeerLost) {
						t.Fatalf("round %d: receive %d: %v, want the abort's cause or ErrPeerLost", i, k, err)
					}
				}
				cancel()
				a.Close()
				b.Close()
			}
		})
	}
}

// TestHelperProcess is the helper process of the two-process tests; run
// normally it does nothing.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(linktest.HelperEnv) != "tcp" {
		return
	}
	linktest.ServeMain(netlink.NewTCPEndpoint(config(os.Getenv("LINKTEST_JOB"), 1, nil)))
}

// TestTCPTwoProcesses: a peer process that is killed or exits fails the
// pending send and receive within 2 s, with errors naming the peer's rank,
// host and address and the link kind.
func TestTCPTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, p *linktest.Proc)
	}{
		{"PeerKilled", func(t *testing.T, p *linktest.Proc) { p.Cmd.Process.Signal(syscall.SIGKILL) }},
		{"PeerExits", func(t *testing.T, p *linktest.Proc) { p.Tell(t, "exit") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob()
			p, l := linktest.ConnectHelper(t, tcpEndpoint(t, config(job, 0, nil)), "TestHelperProcess", "tcp", "LINKTEST_JOB="+job)
			for _, n := range []int{0, 1, 4097, 1<<20 + 3, 64<<20 + 3} {
				p.Echo(t, l, n)
			}
			r := l.Recv(linktest.TagOf(1<<30), make([]byte, 8))
			s := l.Send(linktest.TagOf(1<<30), make([]byte, 64<<20)) // more than the socket buffers
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
				for _, w := range []string{"rank 1", "host1", "127.0.0.1:", "tcp", " lo"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
			}
		})
	}
}
