package bootstrap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// rawConn dials the server without the client library.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader, *bufio.Writer) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c), bufio.NewWriter(c)
}

// expectDropped reads until the server closes c (EOF or reset), failing
// the test if that takes longer than d. Any frames before that are
// returned.
func expectDropped(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) []message {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	var got []message
	for {
		m, err := readMsg(br, MaxFrameSize)
		if err == nil {
			got = append(got, m)
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("server did not drop the connection within %v", d)
		}
		return got
	}
}

func hello(rank int) helloMsg {
	return helloMsg{Rank: uint32(rank), Size: 3, Job: testJob, Host: "intruder"}
}

// TestBadConnectionsDropped opens a misbehaving connection next to a job
// whose collective is already in flight: the connection must be dropped
// and logged, and the job must complete as if nothing happened.
func TestBadConnectionsDropped(t *testing.T) {
	const hs = 300 * time.Millisecond
	tests := []struct {
		name    string
		logSub  string // in the server's drop line
		misdoit func(t *testing.T, addr string)
	}{
		{"garbage", "bad magic", func(t *testing.T, addr string) {
			c, br, _ := rawConn(t, addr)
			_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			expectDropped(t, c, br, 5*time.Second)
		}},
		{"oversize frame", "exceeds limit", func(t *testing.T, addr string) {
			c, br, _ := rawConn(t, addr)
			h := []byte{frameMagic, wireVersion, byte(tHello), 0, 0, 0, 0}
			binary.BigEndian.PutUint32(h[3:], 100<<20)
			_, _ = c.Write(h)
			expectDropped(t, c, br, 5*time.Second)
		}},
		{"wrong version", "wire version", func(t *testing.T, addr string) {
			c, br, _ := rawConn(t, addr)
			_, _ = c.Write([]byte{frameMagic, wireVersion + 1, byte(tHello), 0, 0, 0, 0})
			expectDropped(t, c, br, 5*time.Second)
		}},
		{"silent", "timeout", func(t *testing.T, addr string) {
			c, br, _ := rawConn(t, addr)
			expectDropped(t, c, br, 10*hs)
		}},
		{"half handshake", "read proof", func(t *testing.T, addr string) {
			c, br, bw := rawConn(t, addr)
			if err := writeMsg(bw, hello(1)); err != nil {
				t.Fatal(err)
			}
			got := expectDropped(t, c, br, 10*hs)
			if len(got) != 1 || got[0].msgType() != tChallenge {
				t.Fatalf("got %v, want one challenge", got)
			}
		}},
		{"wrong proof", "wrong proof", func(t *testing.T, addr string) {
			c, br, bw := rawConn(t, addr)
			if err := writeMsg(bw, hello(1)); err != nil {
				t.Fatal(err)
			}
			if _, err := readMsg(br, maxHandshakeFrame); err != nil {
				t.Fatal(err)
			}
			if err := writeMsg(bw, proofMsg{}); err != nil {
				t.Fatal(err)
			}
			got := expectDropped(t, c, br, 5*time.Second)
			if len(got) != 1 || got[0].(rejectMsg).Class != classAuth {
				t.Fatalf("got %v, want an auth reject", got)
			}
		}},
		{"wrong secret", "read proof", func(t *testing.T, addr string) {
			cfg := dialCfg(addr, 1, 3)
			cfg.Secret = []byte("not the secret")
			_, err := Dial(ctxFor(t, 5*time.Second), cfg)
			if !errors.Is(err, errs.ErrAuth) {
				t.Fatalf("Dial with wrong secret = %v, want ErrAuth", err)
			}
		}},
		{"wrong job", "job id", func(t *testing.T, addr string) {
			cfg := dialCfg(addr, 1, 3)
			cfg.JobID = "other-job"
			_, err := Dial(ctxFor(t, 5*time.Second), cfg)
			if !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("Dial with wrong job id = %v, want ErrMismatch", err)
			}
		}},
		{"wrong size", "ranks", func(t *testing.T, addr string) {
			_, err := Dial(ctxFor(t, 5*time.Second), dialCfg(addr, 1, 4))
			if !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("Dial with wrong size = %v, want ErrMismatch", err)
			}
		}},
		{"duplicate rank", "already joined", func(t *testing.T, addr string) {
			_, err := Dial(ctxFor(t, 5*time.Second), dialCfg(addr, 0, 3))
			if !errors.Is(err, errs.ErrMismatch) || !strings.Contains(err.Error(), "host-0") {
				t.Fatalf("Dial of a rank that has joined = %v, want ErrMismatch naming host-0", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, lw := testServer(t, 3, hs)
			early := dialRanks(t, srv.Addr(), 3, 0, 1)
			// Ranks 0 and 1 start a collective; rank 2 joins after the bad
			// connection has been dealt with.
			ctx := ctxFor(t, 10*time.Second)
			results := make(chan error, 3)
			check := func(s Store) {
				got, err := s.AllGather(ctx, payload(s.Rank(), 3))
				if err == nil {
					for i, p := range got {
						if !bytes.Equal(p, payload(i, 3)) {
							err = errors.New("wrong allgather result")
						}
					}
				}
				results <- err
			}
			for _, s := range early {
				go check(s)
			}
			tc.misdoit(t, srv.Addr())
			lw.waitCount(t, 5*time.Second, 1, "dropped connection", tc.logSub)
			late := dialRanks(t, srv.Addr(), 3, 2)
			go check(late[0])
			for range 3 {
				if err := <-results; err != nil {
					t.Fatalf("job disturbed by a bad connection: %v", err)
				}
			}
			for _, s := range append(early, late...) {
				if err := s.Err(); err != nil {
					t.Fatalf("rank %d failed: %v", s.Rank(), err)
				}
			}
		})
	}
}

// dialRanks joins the given ranks of a job of size ranks.
func dialRanks(t *testing.T, addr string, size int, ranks ...int) []Store {
	t.Helper()
	return dialRanksTimeout(t, addr, size, 0, ranks...)
}

// dialRanksTimeout is dialRanks with the clients' PeerTimeout (0: the
// default).
func dialRanksTimeout(t *testing.T, addr string, size int, peerTimeout time.Duration, ranks ...int) []Store {
	t.Helper()
	var out []Store
	for _, r := range ranks {
		cfg := dialCfg(addr, r, size)
		cfg.PeerTimeout = peerTimeout
		s, err := Dial(ctxFor(t, 10*time.Second), cfg)
		if err != nil {
			t.Fatalf("dial rank %d: %v", r, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out = append(out, s)
	}
	return out
}
