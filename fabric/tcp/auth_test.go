package tcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"flexlink/fabric"
	"flexlink/fabric/linktest"
	"flexlink/internal/errs"
)

// TestIntruders has connections that do not belong to the job reach a
// listening endpoint. Each must be dropped (the server closes it) and
// logged, and the endpoint must still make its real link afterwards.
func TestIntruders(t *testing.T) {
	job := newJob()
	var logs linktest.LogBuffer
	cfg1 := config(job, 1, nil)
	cfg1.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	e1 := newEndpoint(t, cfg1)
	a, err := parseAddress(e1.Address())
	if err != nil {
		t.Fatal(err)
	}
	hi := func(mod func(h *hello)) []byte {
		h := hello{from: 0, to: 1, index: 0, socks: 1, id: a.id, nonce: newNonce(), job: job, comm: "world"}
		mod(&h)
		return h.marshal()
	}
	for _, tc := range []struct {
		name  string
		m1    []byte
		proof bool // answer the listener's proof with a forged one
	}{
		{"Garbage", bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 20), false},
		{"ShortHello", []byte(helloMagic + "\x00\x00"), false},
		{"OtherJob", hi(func(h *hello) { h.job = "another-job" }), false},
		{"OtherComm", hi(func(h *hello) { h.comm = "tp-group" }), false},
		{"OtherEndpoint", hi(func(h *hello) { h.id[0] ^= 1 }), false},
		{"HigherRankDials", hi(func(h *hello) { h.from, h.to = 2, 1 }), false},
		{"BadSocketIndex", hi(func(h *hello) { h.index = 5 }), false},
		{"ForgedProof", hi(func(h *hello) {}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", a.hostPort)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(tc.m1); err != nil {
				t.Fatal(err)
			}
			if tc.proof {
				m2 := make([]byte, nonceBytes+macBytes)
				if _, err := io.ReadFull(c, m2); err != nil {
					t.Fatalf("valid hello got no answer: %v", err)
				}
				c.Write(bytes.Repeat([]byte{7}, macBytes))
			} else {
				c.(*net.TCPConn).CloseWrite() // a truncated hello ends here, not at the handshake timeout
			}
			// The server must close the connection without saying more.
			rest, err := io.ReadAll(c)
			if err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("connection not closed by the server: %v", err)
			}
			if len(rest) != 0 {
				t.Fatalf("server sent %q to an intruder", rest)
			}
		})
	}
	if n := strings.Count(logs.String(), "dropped connection"); n != 8 {
		t.Errorf("logged %d dropped connections, want 8:\n%s", n, logs.String())
	}
	// The real rank 0 still connects, and the link works.
	l0, l1 := linktest.ConnectPair(t, newEndpoint(t, config(job, 0, nil)), e1)
	defer l0.Close()
	defer l1.Close()
	r := l1.Recv(linktest.TagOf(1), make([]byte, 3))
	linktest.AwaitOK(t, l0.Send(linktest.TagOf(1), []byte("abc")), "send")
	linktest.AwaitOK(t, r, "recv")
}

// TestWrongSecret: a dialer that does not hold the job's secret learns
// that the listener's proof fails, and no link is made.
func TestWrongSecret(t *testing.T) {
	job := newJob()
	e1 := newEndpoint(t, config(job, 1, nil))
	cfg0 := config(job, 0, nil)
	cfg0.Secret = []byte("not the secret")
	e0 := newEndpoint(t, cfg0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e0.Connect(ctx, 1, e1.Address())
	if !errors.Is(err, errs.ErrAuth) {
		t.Fatalf("connect with a wrong secret: %v, want ErrAuth", err)
	}
	// The listener never got a proven socket: its Connect waits until its
	// context ends.
	ctx1, cancel1 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel1()
	if l, err := e1.Connect(ctx1, 0, e0.Address()); !errors.Is(err, errs.ErrTimeout) {
		t.Fatalf("listener's connect: link %v, error %v; want ErrTimeout", l, err)
	}
}

// TestCommunicatorsApart connects the same two ranks in two communicators
// at once: each link carries only its own communicator's messages, and an
// address of one communicator does not connect the other.
func TestCommunicatorsApart(t *testing.T) {
	job := newJob()
	eps := map[string][2]fabric.Endpoint{}
	for _, comm := range []string{"dp", "tp"} {
		var pair [2]fabric.Endpoint
		for r := range pair {
			cfg := config(job, r, nil)
			cfg.Comm = comm
			pair[r] = newEndpoint(t, cfg)
		}
		eps[comm] = pair
	}
	// Rank 0 of "dp" given the "tp" address: refused.
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
		e0, e1 := newEndpoint(t, cfgs[0]), newEndpoint(t, cfgs[1])
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
