package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// cts builds a clear-to-send message by hand: batches of (sender, length).
func cts(batches ...[][2]uint64) []byte {
	var b []byte
	for _, bt := range batches {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(bt)))
		for _, m := range bt {
			b = binary.LittleEndian.AppendUint32(b, uint32(m[0]))
			b = binary.LittleEndian.AppendUint64(b, m[1])
		}
	}
	return b
}

// TestDecodeCTS: relay rank 1 of a 2 × 4 job (rail routes, but rank 3
// sends its own) takes destination 5's clear-to-send naming the ranks it
// carries (itself included), and refuses garbage with a reason.
func TestDecodeCTS(t *testing.T) {
	via := func(s, d int) int { // rank 3 sends its own (no NVLink to its siblings, say)
		if s == 3 {
			return 3
		}
		return railVia(4)(s, d)
	}
	hosts := []string{"a", "a", "a", "a", "b", "b", "b", "b"}
	p := &Proxy{cfg: Config{Rank: 1, Hosts: hosts, Via: via}}
	nine := make([][2]uint64, 9)
	tests := []struct {
		name string
		msg  []byte
		want []batchWants
		err  string
	}{
		{"two batches", cts([][2]uint64{{0, 10}, {1, 0}, {2, 1 << 20}}, [][2]uint64{{2, 7}}), []batchWants{{{0, 10}, {1, 0}, {2, 1 << 20}}, {{2, 7}}}, ""},
		{"empty", nil, nil, ""},
		{"short count", []byte{1, 0}, nil, "not a batch"},
		{"truncated member", cts([][2]uint64{{0, 10}})[:10], nil, "1 members in 6 bytes"},
		{"zero members", cts([][2]uint64{}), nil, "0 members"},
		{"nine members", cts(nine), nil, "9 members"},
		{"a rank that sends its own", cts([][2]uint64{{3, 10}}), nil, "names rank 3"},
		{"a rank of the destination's host", cts([][2]uint64{{6, 10}}), nil, "names rank 6"},
		{"a rank out of range", cts([][2]uint64{{8, 10}}), nil, "names rank 8"},
		{"twice in a batch", cts([][2]uint64{{0, 10}, {0, 10}}), nil, "twice"},
		{"huge length", cts([][2]uint64{{0, 1 << 60}}), nil, "bytes from rank 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeCTS(tc.msg, 5, 1, p.routesVia)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("decode = %v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decode = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestPlanRecvs: rounds of one chunk per sender, ascending senders, cut
// at MaxRecvs; what a destination plans encodes to what the relay
// decodes, cut between batches when long.
func TestPlanRecvs(t *testing.T) {
	hosts := make([]string, 20)
	for r := range hosts {
		hosts[r] = map[bool]string{true: "a", false: "b"}[r < 10]
	}
	p := &Proxy{cfg: Config{Rank: 15, Hosts: hosts, Chunk: 100, MaxRecvs: 2, Via: func(s, d int) int { return 0 }}}
	got := p.planRecvs(map[int][][]byte{
		3: {make([]byte, 250)},                  // 3 chunks
		1: {make([]byte, 0), make([]byte, 100)}, // 2 chunks: empty, 100
		2: {make([]byte, 50)},                   // 1 chunk
	})
	type m struct{ s, total, n, msg int }
	var flat [][]m
	for _, b := range got {
		var row []m
		for i, w := range b.wants {
			row = append(row, m{w.s, w.total, len(b.bufs[i]), b.msgs[i]})
		}
		flat = append(flat, row)
	}
	wantPlan := [][]m{
		{{1, 0, 0, 0}, {2, 50, 50, 0}}, {{3, 250, 100, 0}}, // round 0, cut at 2
		{{1, 100, 100, 1}, {3, 250, 100, 0}}, // round 1
		{{3, 250, 50, 0}},                    // round 2
	}
	if !reflect.DeepEqual(flat, wantPlan) {
		t.Fatalf("plan %v, want %v", flat, wantPlan)
	}
	// Long plans are cut into messages the relay decodes back in order.
	var long []batch
	for range 3000 {
		long = append(long, batch{wants: []want{{0, 1}, {2, 3}}})
	}
	msgs := encodeCTS(long)
	if len(msgs) < 2 {
		t.Fatalf("%d batches in %d message(s), want several", len(long), len(msgs))
	}
	relay := &Proxy{cfg: Config{Rank: 1, Hosts: hosts, Via: func(s, d int) int { return 1 }}}
	n := 0
	for _, b := range msgs {
		if len(b) > ctsMax {
			t.Fatalf("message of %d bytes, over %d", len(b), ctsMax)
		}
		bs, err := decodeCTS(b, 15, 1, relay.routesVia)
		if err != nil {
			t.Fatal(err)
		}
		for _, bw := range bs {
			if !reflect.DeepEqual(bw, batchWants{{0, 1}, {2, 3}}) {
				t.Fatalf("batch %d decoded as %v", n, bw)
			}
			n++
		}
	}
	if n != len(long) {
		t.Fatalf("%d batches decoded of %d", n, len(long))
	}
}

// TestGroupLateSender: the chunks of one batch leave the relay as they
// come. Rank 5 takes one message each from ranks 0 and 2 (both through
// relay rank 1, in one multi-receive); rank 2's group completes while
// rank 0 has not sent yet, and rank 5's once rank 0 has.
func TestGroupLateSender(t *testing.T) {
	g := newGroupJob(t, 2, 4, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := make([]byte, 700), make([]byte, 900)
	for i := range a {
		a[i] = payload(0, 5, i)
	}
	for i := range b {
		b[i] = payload(2, 5, i)
	}
	ra, rb := make([]byte, len(a)), make([]byte, len(b))
	recvd := make(chan error, 1)
	go func() {
		st, err := g.px[5].Group(ctx, nil, []Msg{{0, ra}, {2, rb}})
		if err == nil && (st.Receives != 1 || st.Buffers != 2) {
			err = fmt.Errorf("%d receives of %d buffers, want one of 2", st.Receives, st.Buffers)
		}
		recvd <- err
	}()
	if _, err := g.px[2].Group(ctx, []Msg{{5, b}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-recvd:
		t.Fatalf("rank 5 done before rank 0 sent: %v", err)
	default:
	}
	if _, err := g.px[0].Group(ctx, []Msg{{5, a}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-recvd; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ra, a) || !reflect.DeepEqual(rb, b) {
		t.Fatal("rank 5 received other bytes than sent")
	}
}

// TestCTSGarbage: a clear-to-send that a relay cannot take fails its
// service with the destination named: garbage, a sender that does not
// route through it, and more batches ahead than it keeps. (The
// connections prove the job secret: anything else is dropped at hello.)
func TestCTSGarbage(t *testing.T) {
	many := make([][]byte, maxSched/1000+2)
	for i := range many {
		many[i] = cts(repeat([][2]uint64{{0, 1}}, 1000)...)
	}
	for _, tc := range []struct {
		name string
		msgs [][]byte
		want string
	}{
		{"garbage", [][]byte{{1, 2, 3, 4, 5}}, "a batch of 67305985 members"},
		{"not through this relay", [][]byte{cts([][2]uint64{{6, 10}})}, "names rank 6"},
		{"too far ahead", many, "more than 1048576 batches ahead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroupJob(t, 2, 4, 1<<10)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sc, h := dial(ctx, t, g.px[1])
			a := Auth{Secret: testSecret, JobID: "job", Key: "pxn/test/"}
			if err := a.sayHello(ctx, sc, peerKey{From: 5, Kind: connCTS}, h); err != nil {
				t.Fatal(err)
			}
			go func() { // until the relay fails and drops the connection
				for _, m := range tc.msgs {
					if send(ctx, sc, m, ctsTag) != nil {
						return
					}
				}
			}()
			select {
			case r := <-g.reported:
				g.mu.Lock()
				err := g.failed[r]
				g.mu.Unlock()
				if r != 1 || !strings.Contains(err.Error(), "rank 1 relay") || !strings.Contains(err.Error(), "rank 5") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("rank %d reported %v, want rank 1 naming rank 5 and %q", r, err, tc.want)
				}
				t.Log(err)
			case <-ctx.Done():
				t.Fatal("the relay took the clear-to-send")
			}
		})
	}
}

func repeat[T any](x T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = x
	}
	return out
}
