package bootstrap

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

const transientPrefix = "reporter@"

func isTransient(host string) bool { return strings.HasPrefix(host, transientPrefix) }

// transientCfg is rank's DialConfig as a transient member.
func transientCfg(addr string, rank, size int) DialConfig {
	cfg := dialCfg(addr, rank, size)
	cfg.Host = transientPrefix + cfg.Host
	return cfg
}

// rawTransient joins as rank's transient member without the client
// library: the handshake, then nothing. The caller misbehaves on it.
func rawTransient(t *testing.T, addr string, rank, size int) (net.Conn, *bufio.Writer) {
	t.Helper()
	c, br, bw := rawConn(t, addr)
	cfg := transientCfg(addr, rank, size)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := clientHandshake(br, bw, &cfg); err != nil {
		t.Fatalf("rank %d: transient handshake: %v", rank, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, bw
}

// TestTransientMemberEnds: a transient member (ServerConfig.Transient: a
// process that joins only to publish, flexlink's libnccl reporting to
// flexrun) that dies in the middle of a frame, sends garbage, falls
// silent or just says goodbye loses only its own session: the server
// tells of its loss, the job does not fail, another transient member's
// put still lands (and is told to the owner), the same rank may join
// again and put, and the job's own ranks' collective completes. A staying
// rank's loss still fails the job (TestRankLost).
func TestTransientMemberEnds(t *testing.T) {
	const size = 4
	tests := []struct {
		name      string
		lost      string // in the EventLost's text; "": a goodbye, no loss
		misbehave func(t *testing.T, c net.Conn, bw *bufio.Writer)
	}{
		{"killed mid-frame", "truncated payload", func(t *testing.T, c net.Conn, bw *bufio.Writer) {
			// A put of 1000 bytes of which 10 arrive, then the process is gone.
			f := marshal(putMsg{ID: 1, Key: "end/w", Value: make([]byte, 1000)})
			if _, err := c.Write(f[:headerLen+10]); err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
		}},
		{"garbage", "malformed", func(t *testing.T, c net.Conn, bw *bufio.Writer) {
			var h [headerLen]byte
			h[0], h[1], h[2] = frameMagic, wireVersion, 0xEE // no such type
			binary.BigEndian.PutUint32(h[3:], 4)
			if _, err := c.Write(append(h[:], "junk"...)); err != nil {
				t.Fatal(err)
			}
		}},
		{"a handshake message after joining", "unexpected hello", func(t *testing.T, c net.Conn, bw *bufio.Writer) {
			if err := writeMsg(bw, helloMsg{Rank: 2, Size: size, Job: testJob, Host: "x"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"goodbye", "", func(t *testing.T, c net.Conn, bw *bufio.Writer) {
			if err := writeMsg(bw, byeMsg{}); err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &eventLog{ch: make(chan struct{}, 1)}
			srv, _ := testServerCfg(t, ServerConfig{Size: size, OnEvent: l.add, Transient: isTransient})
			ctx := ctxFor(t, 10*time.Second)
			// The job's own ranks 0 and 1 start a collective that waits
			// for ranks 2 and 3, which join for good last.
			stores := make([]Store, size)
			for r := range 2 {
				s, err := Dial(ctx, dialCfg(srv.Addr(), r, size))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				stores[r] = s
			}
			early := onAllAsync(stores[:2], func(s Store) error { _, err := s.AllGather(ctx, []byte("x")); return err })
			c, bw := rawTransient(t, srv.Addr(), 2, size)
			l.waitFor(t, "the transient member's join", func(ev Event) bool { return ev.Kind == EventJoined && ev.Rank == 2 })
			tc.misbehave(t, c, bw)
			if tc.lost != "" {
				ev := l.waitFor(t, "the transient member's loss", func(ev Event) bool { return ev.Kind == EventLost && ev.Rank == 2 })
				if !strings.Contains(ev.Text, tc.lost) || ev.Host != transientPrefix+"host-2" {
					t.Errorf("loss event %+v, want its text to say %q", ev, tc.lost)
				}
			} else {
				l.waitFor(t, "the transient member's goodbye", func(ev Event) bool { return ev.Kind == EventLeft && ev.Rank == 2 })
			}
			// Another transient member's put lands and is told.
			rep, err := Dial(ctx, transientCfg(srv.Addr(), 3, size))
			if err == nil {
				err = rep.Put(ctx, "end/w", []byte("rank 3's report"))
			}
			if err != nil {
				t.Fatalf("another reporter's put after the transient member's end: %v", err)
			}
			if err := rep.Close(); err != nil {
				t.Errorf("another reporter's goodbye: %v", err)
			}
			l.waitFor(t, "the other reporter's put", func(ev Event) bool {
				return ev.Kind == EventPut && ev.Rank == 3 && string(ev.Value) == "rank 3's report"
			})
			// The rank that ended badly joins again, as a reporter, and puts.
			again, err := Dial(ctx, transientCfg(srv.Addr(), 2, size))
			if err == nil {
				err = again.Put(ctx, "end/w2", []byte("rank 2, again"))
			}
			if err != nil {
				t.Fatalf("rank 2 joining again after its transient session ended: %v", err)
			}
			_ = again.Close()
			// And ranks 2 and 3 join for good (a transient session is not
			// the rank's join): the collective completes for everyone.
			for r := 2; r < size; r++ {
				s, err := Dial(ctx, dialCfg(srv.Addr(), r, size))
				if err != nil {
					t.Fatalf("rank %d joining for good after its transient sessions: %v", r, err)
				}
				t.Cleanup(func() { _ = s.Close() })
				stores[r] = s
			}
			late := onAll(stores[2:], func(s Store) error { _, err := s.AllGather(ctx, []byte("x")); return err })
			for r, err := range append(<-early, late...) {
				if err != nil {
					t.Errorf("rank %d: allgather: %v", r, err)
				}
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, ev := range l.evs {
				if ev.Kind == EventFailed {
					t.Errorf("the job failed: %+v", ev)
				}
			}
		})
	}
}

// TestTransientSessions: a transient member's new session replaces one
// still open (the old connection's goodbye, arriving late, does not end
// the new one; its later messages are ignored); a transient member takes
// part in no collective (refused at once, not left waiting); and a rank
// that joined for good is not replaced by one claiming to be transient.
func TestTransientSessions(t *testing.T) {
	const size = 2
	l := &eventLog{ch: make(chan struct{}, 1)}
	srv, lw := testServerCfg(t, ServerConfig{Size: size, OnEvent: l.add, Transient: isTransient})
	ctx := ctxFor(t, 10*time.Second)

	old, oldW := rawTransient(t, srv.Addr(), 0, size)
	l.waitFor(t, "the first session's join", func(ev Event) bool { return ev.Kind == EventJoined && ev.Rank == 0 })
	cur, err := Dial(ctx, transientCfg(srv.Addr(), 0, size))
	if err != nil {
		t.Fatalf("a second transient session of rank 0 while the first is open: %v", err)
	}
	t.Cleanup(func() { _ = cur.Close() })
	// The old session says goodbye late; the new one goes on.
	if err := writeMsg(oldW, putMsg{ID: 7, Key: "from-old", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := writeMsg(oldW, byeMsg{}); err != nil {
		t.Fatal(err)
	}
	// Once the server has closed the old connection, it has handled all
	// that came on it.
	_ = old.(*net.TCPConn).CloseWrite()
	_ = old.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, old); err != nil {
		t.Fatalf("the server did not close the old session's connection: %v", err)
	}
	if err := cur.Put(ctx, "from-new", []byte("y")); err != nil {
		t.Fatalf("the new session's put after the old one's goodbye: %v", err)
	}
	l.mu.Lock()
	for _, ev := range l.evs {
		if ev.Kind == EventPut && ev.Key == "from-old" || ev.Kind == EventLeft {
			t.Errorf("a replaced session was heard: %+v", ev)
		}
	}
	l.mu.Unlock()

	call, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cur.AllGather(call, []byte("x")); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("a transient member's allgather: %v, want it refused with ErrNotSupported", err)
	}

	staying, err := Dial(ctx, dialCfg(srv.Addr(), 1, size))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = staying.Close() })
	if _, err := Dial(ctx, transientCfg(srv.Addr(), 1, size)); !errors.Is(err, errs.ErrMismatch) {
		t.Errorf("a transient join of rank 1, which joined for good: %v, want it refused (ErrMismatch)", err)
	}
	if err := staying.Put(ctx, "from-rank-1", []byte(fmt.Sprint(1))); err != nil {
		t.Errorf("rank 1 after a transient join claiming its rank was refused: %v", err)
	}

	// A transient member's abort ends only its own session.
	if err := cur.Abort(errors.New("a reporter gives up")); err != nil {
		t.Fatal(err)
	}
	lw.waitCount(t, 5*time.Second, 1, "abort ends only its session", "a reporter gives up")
	if _, err := staying.Get(ctx, "from-new"); err != nil {
		t.Errorf("rank 1 after a transient member's abort: %v", err)
	}
	again, err := Dial(ctx, transientCfg(srv.Addr(), 0, size))
	if err == nil {
		err = again.Put(ctx, "after-abort", []byte("z"))
		_ = again.Close()
	}
	if err != nil {
		t.Errorf("rank 0's transient session after its abort: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.evs {
		if ev.Kind == EventFailed {
			t.Errorf("the job failed: %+v", ev)
		}
	}
}

// onAllAsync is onAll in the background: the errors arrive once every
// call has returned.
func onAllAsync(stores []Store, f func(s Store) error) <-chan []error {
	out := make(chan []error, 1)
	go func() { out <- onAll(stores, f) }()
	return out
}
