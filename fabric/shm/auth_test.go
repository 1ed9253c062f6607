package shm

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestIntruders has processes that do not belong to the job reach a
// listening endpoint's socket. Each must be dropped (the socket closed,
// no segment taken) and counted, with one rate-limited WARN; the real peer
// connects afterwards.
func TestIntruders(t *testing.T) {
	job := newJob()
	var logs linktest.LogBuffer
	cfg1 := config(job, 1, nil)
	cfg1.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	e1, err := NewEndpoint(cfg1)
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	name := strings.Fields(string(e1.Address()))[2]
	hi := func(mod func(h *hello)) []byte {
		h := hello{from: 0, to: 1, ringBytes: minRingBytes, nonce: newNonce(), job: job, comm: "world"}
		mod(&h)
		return h.marshal()
	}
	for _, tc := range []struct {
		name  string
		m1    []byte
		proof bool // answer the listener's proof with a forged one and a segment
	}{
		{"Garbage", bytes.Repeat([]byte{0xff}, 300), false},
		{"OtherJob", hi(func(h *hello) { h.job = "another-job" }), false},
		{"OtherComm", hi(func(h *hello) { h.comm = "tp-group" }), false},
		{"HigherRankDials", hi(func(h *hello) { h.from, h.to = 2, 1 }), false},
		{"HugeRing", hi(func(h *hello) { h.ringBytes = 1 << 40 }), false},
		{"ForgedProof", hi(func(h *hello) {}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unixpacket", "@"+name)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			uc := c.(*net.UnixConn)
			uc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := uc.Write(tc.m1); err != nil {
				t.Fatal(err)
			}
			if tc.proof {
				if m2, fds, err := readPacket(uc); err != nil || len(m2) != m2Body+macBytes {
					t.Fatalf("valid hello got answer %d bytes, %v", len(m2), err)
				} else {
					closeFds(fds)
				}
				fd, seg, err := createSegment("flexlink-intruder", minRingBytes)
				if err != nil {
					t.Fatal(err)
				}
				defer seg.unmap()
				uc.WriteMsgUnix(bytes.Repeat([]byte{7}, macBytes), unix.UnixRights(fd), nil)
				unix.Close(fd)
			}
			// The listener must close the socket without a word.
			if b, _, err := readPacket(uc); err == nil {
				t.Fatalf("listener answered an intruder with %q", b)
			}
		})
	}
	// Every intruder is counted; the log has one WARN for all of them
	// (rate-limited: a scan cannot fill it).
	if n := e1.(*endpoint).drops.Count(); n != 6 {
		t.Errorf("counted %d dropped connections, want 6", n)
	}
	if n := strings.Count(logs.String(), "did not prove the job secret"); n != 1 {
		t.Errorf("logged %d WARN lines for 6 dropped connections, want 1:\n%s", n, logs.String())
	}
	e0, err := NewEndpoint(config(job, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer e0.Close()
	l0, l1 := linktest.ConnectPair(t, e0, e1)
	defer l0.Close()
	defer l1.Close()
	r := l1.Recv(linktest.TagOf(1), make([]byte, 3))
	linktest.AwaitOK(t, l0.Send(linktest.TagOf(1), []byte("abc")), "send")
	linktest.AwaitOK(t, r, "recv")
}

func TestWrongSecret(t *testing.T) {
	job := newJob()
	e1, err := NewEndpoint(config(job, 1, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	cfg0 := config(job, 0, nil)
	cfg0.Secret = []byte("not the secret")
	e0, err := NewEndpoint(cfg0)
	if err != nil {
		t.Fatal(err)
	}
	defer e0.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e0.Connect(ctx, 1, e1.Address()); !errors.Is(err, errs.ErrAuth) {
		t.Fatalf("connect with a wrong secret: %v, want ErrAuth", err)
	}
	ctx1, cancel1 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel1()
	if l, err := e1.Connect(ctx1, 0, e0.Address()); !errors.Is(err, errs.ErrTimeout) {
		t.Fatalf("listener's connect: link %v, error %v; want ErrTimeout", l, err)
	}
}

func TestAddressChecks(t *testing.T) {
	e, err := NewEndpoint(config(newJob(), 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f := strings.Fields(string(e.Address()))
	for _, tc := range []struct {
		name string
		addr string
		want error // nil: any error
	}{
		{"OtherHost", strings.Join([]string{f[0], "another-boot-id", f[2]}, " "), errs.ErrNotSupported},
		{"Garbage", "flexlink-tcp/1 abc", nil},
		{"Empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := e.Connect(ctx, 1, []byte(tc.addr))
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("connect to %q: %v, want an error wrapping %v", tc.addr, err, tc.want)
			}
		})
	}
}

func TestBadSettings(t *testing.T) {
	for _, ring := range []string{"1000", "65537", "one", "2147483648"} {
		cfg := config("j", 0, map[string]string{"FLEXLINK_SHM_RING_BYTES": ring})
		if e, err := NewEndpoint(cfg); err == nil {
			e.Close()
			t.Errorf("NewEndpoint with FLEXLINK_SHM_RING_BYTES=%s succeeded", ring)
		}
	}
	for _, cfg := range []fabric.EndpointConfig{
		{Rank: 0, Size: 2},                      // no secret
		{Rank: 2, Size: 2, Secret: []byte("s")}, // rank out of range
	} {
		if e, err := NewEndpoint(cfg); err == nil {
			e.Close()
			t.Errorf("NewEndpoint(%+v) succeeded", cfg)
		}
	}
}
