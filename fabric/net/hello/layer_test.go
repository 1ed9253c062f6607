package hello

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/internal/errs"
)

func openTCP(t *testing.T) net.Provider {
	t.Helper()
	p, err := tcp.New(tcp.Options{IfName: "lo", Sockets: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestOpenChecksTags: a layer opens over a provider that carries its
// largest tag (the hello's included) and refuses one that does not, with
// ErrNotSupported naming the caller and the provider's width.
func TestOpenChecksTags(t *testing.T) {
	p := openTCP(t)
	for _, c := range []struct {
		bits   int
		maxTag uint64
		tag    uint64
		ok     bool
	}{
		{64, 1 << 40, 7, true},
		{20, 1<<20 - 1, 7, true},
		{19, 1<<20 - 1, 7, false},
		{3, 7, 7, true},
		{3, 5, 8, false}, // the hello's tag is above MaxTag: it counts too
	} {
		_, err := Open(nettest.Narrow(p, c.bits), 0, Options{Config: Config{Tag: c.tag}, MaxTag: c.maxTag, What: "the test caller (FLEXLINK_TEST)"})
		if c.ok && err != nil {
			t.Errorf("%d bits, tags to %#x, hello %d: %v", c.bits, c.maxTag, c.tag, err)
		}
		if !c.ok && (!errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), "the test caller (FLEXLINK_TEST)") ||
			!strings.Contains(err.Error(), fmt.Sprintf("carries %d bits", c.bits))) {
			t.Errorf("%d bits, tags to %#x, hello %d: %v; want ErrNotSupported naming the caller and the width", c.bits, c.maxTag, c.tag, err)
		}
	}
	if _, err := Open(p, 1, Options{What: "the test caller"}); err == nil || !strings.Contains(err.Error(), "device 1") {
		t.Errorf("Open on device 1 of a provider with 1: %v", err)
	}
}

// TestServe: a listener serving several peers hands over each peer's
// proved connection once; a foreign one, a hello the caller's want
// refuses, and a second connection from a peer already taken are dropped
// and counted. The first two dialers see their confirmation fail; the
// third, refused by take after its confirmation, sees its next sends
// fail. The real peers' confirmations complete and their data arrives.
func TestServe(t *testing.T) {
	p := openTCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	drops := &Drops{What: "test"}
	layer, err := Open(p, 0, Options{Config: cfg, MaxTag: 42, What: "test", Wait: 2 * time.Second, Drops: drops})
	if err != nil {
		t.Fatal(err)
	}
	l, err := layer.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		r net.RecvConn
		h Hello
	}
	taken := make(chan got, 8)
	var mu sync.Mutex
	seen := map[int]bool{}
	served := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() {
		served <- l.Serve(sctx, func(h Hello) error {
			if h.To != 0 || h.From < 1 || h.From > 3 {
				return fmt.Errorf("hello from rank %d to rank %d", h.From, h.To)
			}
			return nil
		}, func(r net.RecvConn, h Hello) error {
			mu.Lock()
			defer mu.Unlock()
			if seen[h.From] {
				return fmt.Errorf("a second connection from rank %d", h.From)
			}
			seen[h.From] = true
			taken <- got{r, h}
			return nil
		})
	}()
	dial := func(c Config, h Hello) (net.SendConn, error) {
		t.Helper()
		d, err := Open(p, 0, Options{Config: c, MaxTag: 42, What: "dialer"})
		if err != nil {
			t.Fatal(err)
		}
		s, q, err := d.Dial(ctx, l.Handle(), h)
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.Wait(ctx)
		return s, err
	}
	foreign := cfg
	foreign.Secret = []byte("not the job's")
	for _, c := range []struct {
		name string
		c    Config
		h    Hello
		ok   string // "": handed over; "hello": refused at the hello; "take": refused by take
	}{
		{"rank 1", cfg, Hello{From: 1, To: 0, Extra: []byte("one")}, ""},
		{"foreign rank 2", foreign, Hello{From: 2, To: 0}, "hello"},
		{"rank 2", cfg, Hello{From: 2, To: 0, Extra: []byte("two")}, ""},
		{"rank 4 (not wanted)", cfg, Hello{From: 4, To: 0}, "hello"},
		{"rank 1 again", cfg, Hello{From: 1, To: 0}, "take"},
	} {
		s, err := dial(c.c, c.h)
		if (c.ok == "hello") != (err != nil) {
			t.Errorf("%s: confirmation %v, want refused %v", c.name, err, c.ok == "hello")
		}
		if c.ok == "take" {
			for err == nil && ctx.Err() == nil { // the drop reaches the dialer
				var q net.Request
				if q, err = s.ISend([]byte("more"), 40, nil); err == nil {
					_, err = q.Wait(ctx)
				}
			}
			if ctx.Err() != nil {
				t.Errorf("%s: still delivers: not dropped", c.name)
			}
		}
		if c.ok != "" {
			s.Close()
			continue
		}
		defer s.Close()
		a := <-taken
		if a.h.From != c.h.From || string(a.h.Extra) != string(c.h.Extra) {
			t.Errorf("%s: handed over %+v", c.name, a.h)
		}
		q, err := s.ISend([]byte(c.name), 40, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 32)
		rq, err := a.r.IRecv([][]byte{b}, []uint64{40}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := rq.Wait(ctx); err != nil || string(b[:n[0]]) != c.name {
			t.Errorf("%s: data %q, %v", c.name, b[:n[0]], err)
		}
		if _, err := q.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		a.r.Close()
	}
	if n := drops.Count(); n != 3 {
		t.Errorf("%d connections dropped, want 3 (foreign, not wanted, second)", n)
	}
	stop()
	if err := <-served; err == nil {
		t.Error("Serve returned nil after its context ended")
	}
	l.Close()
}
