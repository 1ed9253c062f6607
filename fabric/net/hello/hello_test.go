package hello

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/internal/errs"
)

var cfg = Config{Secret: []byte("job secret"), JobID: "job1", Purpose: "flexlink test hello", Scope: "comm w", Tag: 7}

func TestParse(t *testing.T) {
	handle, other := []byte("listener A"), []byte("listener B")
	h := Hello{From: 3, To: 1, Extra: []byte("host-3")}
	b := cfg.Marshal(h, handle)
	got, err := cfg.Parse(b, handle)
	if err != nil || got.From != 3 || got.To != 1 || string(got.Extra) != "host-3" {
		t.Fatalf("Parse(Marshal(%+v)) = %+v, %v", h, got, err)
	}
	flip := func(i int) []byte { c := bytes.Clone(b); c[i] ^= 1; return c }
	wrongJob, wrongScope, wrongSecret, wrongPurpose := cfg, cfg, cfg, cfg
	wrongJob.JobID, wrongScope.Scope, wrongSecret.Secret, wrongPurpose.Purpose = "job2", "comm x", []byte("guess"), "flexlink other hello"
	for _, c := range []struct {
		name string
		b    []byte
		c    Config
		h    []byte
		want error
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n"), cfg, handle, ErrNotHello},
		{"empty", nil, cfg, handle, ErrNotHello},
		{"truncated", b[:len(b)-1], cfg, handle, ErrNotHello},
		{"one byte more", append(bytes.Clone(b), 0), cfg, handle, ErrNotHello},
		{"replayed to another listener", b, cfg, other, errs.ErrAuth},
		{"other job", b, wrongJob, handle, errs.ErrAuth},
		{"other communicator", b, wrongScope, handle, errs.ErrAuth},
		{"other secret", b, wrongSecret, handle, errs.ErrAuth},
		{"other kind of connection", b, wrongPurpose, handle, errs.ErrAuth},
		{"sender changed", flip(4), cfg, handle, errs.ErrAuth},
		{"receiver changed", flip(8), cfg, handle, errs.ErrAuth},
		{"extra changed", flip(fixed), cfg, handle, errs.ErrAuth},
		{"proof changed", flip(len(b) - 1), cfg, handle, errs.ErrAuth},
	} {
		if _, err := c.c.Parse(c.b, c.h); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

// TestAcceptDropsForeign: on a tcp listener, connections that send
// garbage, a hello made for another listener (a replay), a hello of
// another job, and nothing at all are each dropped, with one WARN; the
// real peer that comes after them is accepted and its data arrives.
func TestAcceptDropsForeign(t *testing.T) {
	p, err := tcp.New(tcp.Options{IfName: "lo"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var buf linktest.LogBuffer
	drops := &Drops{Log: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn}), What: "test listener"}
	layer, err := Open(p, 0, Options{Config: cfg, MaxTag: 42, What: "test", Wait: 300 * time.Millisecond, Drops: drops})
	if err != nil {
		t.Fatal(err)
	}
	l, err := layer.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other, err := layer.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	type accepted struct {
		r   net.RecvConn
		h   Hello
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		r, h, err := l.Accept(ctx, func(h Hello) error {
			if h.To != 0 || h.From != 1 {
				return errors.New("not rank 1 to rank 0")
			}
			return nil
		})
		done <- accepted{r, h, err}
	}()
	dial := func(msg []byte, tag uint64) net.SendConn {
		t.Helper()
		s, err := p.Connect(ctx, 0, l.Handle())
		if err != nil {
			t.Fatal(err)
		}
		if msg != nil {
			if _, err := s.ISend(msg, tag, nil); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	otherJob := cfg
	otherJob.Secret = []byte("another job's secret")
	foreign := []net.SendConn{
		dial([]byte("garbage garbage garbage garbage garbage garbage"), cfg.Tag),
		dial([]byte("wrong tag"), 99),
		dial(cfg.Marshal(Hello{From: 1, To: 0}, other.Handle()), cfg.Tag), // replay: made for another listener
		dial(otherJob.Marshal(Hello{From: 1, To: 0}, l.Handle()), cfg.Tag),
		dial(cfg.Marshal(Hello{From: 2, To: 0}, l.Handle()), cfg.Tag), // a member, but not the peer wanted
		dial(nil, 0), // silent
	}
	defer func() {
		for _, s := range foreign {
			s.Close()
		}
	}()
	for drops.Count() < len(foreign) { // the silent one goes at its deadline
		select {
		case a := <-done:
			t.Fatalf("Accept returned before the real peer came: %+v", a)
		case <-ctx.Done():
			t.Fatalf("only %d of %d foreign connections dropped", drops.Count(), len(foreign))
		case <-time.After(10 * time.Millisecond): // poll the count
		}
	}
	s, confirmed, err := layer.Dial(ctx, l.Handle(), Hello{From: 1, To: 0, Extra: []byte("real")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := s.ISend([]byte("payload"), 42, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.h.From != 1 || string(a.h.Extra) != "real" {
		t.Fatalf("Accept = %+v", a)
	}
	defer a.r.Close()
	b := make([]byte, 16)
	rq, err := a.r.IRecv([][]byte{b}, []uint64{42}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := rq.Wait(ctx)
	if err != nil || string(b[:n[0]]) != "payload" {
		t.Fatalf("payload %q, %v", b[:n[0]], err)
	}
	if _, err := q.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := confirmed.Wait(ctx); err != nil {
		t.Fatalf("the accepted hello's confirmation: %v", err)
	}
	if w := strings.Count(buf.String(), "[WARN]"); w != 1 {
		t.Errorf("%d WARN lines for %d dropped connections, want 1:\n%s", w, len(foreign), buf.String())
	}
}
