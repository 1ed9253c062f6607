package multilink_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
	"github.com/flexlink/flexlink/internal/settings"
)

// traffic counts what each fake network delivered from rank 0 to rank 1.
type traffic struct {
	mu    sync.Mutex
	msgs  []int
	bytes []int
}

func (tr *traffic) options(n int) []fake.Options {
	tr.msgs, tr.bytes = make([]int, n), make([]int, n)
	var out []fake.Options
	for i := range n {
		out = append(out, fake.Options{OnDeliver: func(from, to, size int) {
			if from == 0 {
				tr.mu.Lock()
				tr.msgs[i]++
				tr.bytes[i] += size
				tr.mu.Unlock()
			}
		}})
	}
	return out
}

func (tr *traffic) snapshot() ([]int, []int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]int(nil), tr.msgs...), append([]int(nil), tr.bytes...)
}

// TestSplitUsesEveryLink: a large message goes over all three links as a
// frame plus a payload each; a small one is one inline frame on one link.
func TestSplitUsesEveryLink(t *testing.T) {
	var tr traffic
	r := newRig(t, tr.options(3), nil, multilink.Options{})
	send := func(n int) {
		t.Helper()
		msg := linktest.Payload(uint64(n), n)
		got := make([]byte, n)
		rr := r.b.Recv(linktest.TagOf(n), got)
		linktest.AwaitOK(t, r.a.Send(linktest.TagOf(n), msg), "send")
		linktest.AwaitOK(t, rr, "recv")
		if !bytes.Equal(got, msg) {
			t.Fatalf("%d-byte message: data differs", n)
		}
	}
	const big = 16<<20 + 100
	send(big)
	msgs, byts := tr.snapshot()
	total := 0
	for i := range msgs {
		if msgs[i] != 2 {
			t.Errorf("link %d carried %d messages of the big one, want 2 (frame and payload)", i, msgs[i])
		}
		total += byts[i] - frameBytes
	}
	if total != big {
		t.Errorf("payload bytes over the links sum to %d, want %d", total, big)
	}
	send(100)
	after, _ := tr.snapshot()
	extra := 0
	for i := range after {
		extra += after[i] - msgs[i]
	}
	if extra != 1 {
		t.Errorf("a 100-byte message took %d underlying messages, want 1 inline frame", extra)
	}
}

// TestReceivesPostedLate: split messages sent before any receive is posted,
// then received one at a time, take the staging path (a part arrives while
// an earlier message is still incomplete) and must come out whole and in
// order.
func TestReceivesPostedLate(t *testing.T) {
	r := newRig(t, []fake.Options{{}, {MaxSegment: 1 << 16}, {}}, nil, multilink.Options{})
	const n = 6
	var sends []fabric.Request
	var msgs [][]byte
	for i := range n {
		msgs = append(msgs, linktest.Payload(uint64(i), 3<<20+i*4097))
		sends = append(sends, r.a.Send(linktest.TagOf(i), msgs[i]))
	}
	for i := range n {
		got := make([]byte, len(msgs[i]))
		linktest.AwaitOK(t, r.b.Recv(linktest.TagOf(i), got), fmt.Sprintf("recv %d", i))
		if !bytes.Equal(got, msgs[i]) {
			t.Fatalf("message %d: data differs", i)
		}
	}
	for i, s := range sends {
		linktest.AwaitOK(t, s, fmt.Sprintf("send %d", i))
	}
}

// TestLinksFilter: FLEXLINK_LINKS=nvlink,net leaves the pcie link out of
// the planner, and the channel sends nothing over it.
func TestLinksFilter(t *testing.T) {
	var tr traffic
	kinds := []fabric.Kind{fabric.KindNVLink, fabric.KindPCIe, fabric.KindNet}
	planner := func(links []fabric.Link) *balance.Planner {
		specs := multilink.Specs(links)
		for i := range specs {
			specs[i].Kind = kinds[i]
		}
		kept, err := balance.FilterLinks(specs, settings.Map(map[string]string{"FLEXLINK_LINKS": "nvlink,net"}))
		if err != nil {
			t.Fatal(err)
		}
		return mustPlanner(t, kept, balance.Config{})
	}
	r := newRig(t, tr.options(3), planner, multilink.Options{})
	msg := linktest.Payload(5, 16<<20)
	got := make([]byte, len(msg))
	rr := r.b.Recv(linktest.TagOf(1), got)
	linktest.AwaitOK(t, r.a.Send(linktest.TagOf(1), msg), "send")
	linktest.AwaitOK(t, rr, "recv")
	if !bytes.Equal(got, msg) {
		t.Fatal("data differs")
	}
	msgs, _ := tr.snapshot()
	if msgs[1] != 0 || msgs[0] == 0 || msgs[2] == 0 {
		t.Fatalf("messages per link %v: want traffic on nvlink (0) and net (2) only", msgs)
	}
}
