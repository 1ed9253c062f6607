package pcieshare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/errs"
)

type testHost struct{}

func (testHost) Log() hclog.Logger   { return hclog.NewNullLogger() }
func (testHost) Host() string        { return "fakehost" }
func (testHost) PeerHost(int) string { return "fakehost" }

// onePlan is a split with B bytes and one PCIe part toward every peer.
type onePlan struct {
	b      int
	part   pcie.Plan
	pushed int
}

func (p *onePlan) Bytes() int         { return p.b }
func (p *onePlan) Part(int) pcie.Plan { return p.part }
func (p *onePlan) Split(int) bool     { return p.part.Bytes > 0 }
func (p *onePlan) Pushed(int) int     { return p.pushed }

// The PCIe share is a link share.
var _ linkshare.Share = (*Share)(nil)

// pair is two ranks' shares on two fake GPUs, set up as a plane does:
// Offer, the references exchanged, Open with the masks all-gathered.
func pair(t *testing.T, staging int) (sh [2]*Share, devs [2]*gpu.Device, traces *[2][]Trace) {
	t.Helper()
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	traces = &[2][]Trace{}
	blobs := make([][]byte, 2)
	for r := range 2 {
		devs[r], _ = drv.Device(r)
		sh[r] = New(Config{Settings: Settings{Staging: staging, Fixed: -1, MinSlot: 4096}, Host: testHost{}, Dev: devs[r], N: 2, Me: r,
			Trace: func(x Trace) { traces[r] = append(traces[r], x) }})
		blobs[r] = make([]byte, sh[r].BlobBytes())
		if err := sh[r].Offer(context.Background(), blobs[r]); err != nil {
			t.Fatal(err)
		}
	}
	masks := make(chan []byte, 2)
	all := [2]chan []byte{make(chan []byte, 1), make(chan []byte, 1)}
	go func() { // the all-gather: rank r's mask at all[r*2:]
		got := map[int][]byte{}
		for len(got) < 2 {
			m := <-masks
			got[int(m[2])] = m[:2]
		}
		out := append(append([]byte(nil), got[0]...), got[1]...)
		all[0] <- out
		all[1] <- out
	}()
	errc := make(chan error, 2)
	for r := range 2 {
		go func() {
			agree := func(ctx context.Context, mine, out []byte) error {
				masks <- append(append([]byte(nil), mine...), byte(r))
				select {
				case a := <-all[r]:
					copy(out, a)
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errc <- sh[r].Open(ctx, blobs, linkshare.Open{Bus: []string{"0000:01:00.0", "0000:02:00.0"}, Agree: agree})
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range sh {
			s.Close()
		}
	})
	return sh, devs, traces
}

// TestShareCall: one call from rank 0 to rank 1 through the share's
// interface, as the plane drives it: the tails of two pushes staged D2H
// over several slots land in rank 1's recv at their offsets (and nothing
// else does), both sides see the same staging table, the receiver waits
// only on slot events the sender recorded, and the done message is the
// length the receiver expects.
func TestShareCall(t *testing.T) {
	sh, devs, traces := pair(t, 1<<20)
	const b = 256 << 10 // two pushes of 128 KiB
	plan := &onePlan{b: b, part: pcie.Size(b, 0.5, 1<<20, 4096)}
	if plan.part.Bytes != 128<<10 || plan.part.SlotBytes != 8<<10 {
		t.Fatalf("plan %+v", plan.part)
	}
	idle := &onePlan{}
	var recs []SplitRec
	for _, s := range sh {
		s.OnSplit = func(x SplitRec) { recs = append(recs, x) }
	}
	sh[0].Begin([]int{1}, 1, plan)
	sh[1].Begin([]int{0}, 1, idle)
	w := [2][]byte{make([]byte, Words), make([]byte, Words)}
	sh[0].ReadyWords(1, w[0])
	sh[1].ReadyWords(0, w[1])
	s0, err := devs[0].NewStream()
	if err != nil {
		t.Fatal(err)
	}
	s1, err := devs[1].NewStream()
	if err != nil {
		t.Fatal(err)
	}
	for r, s := range []*gpu.Stream{s0, s1} {
		if err := sh[r].Ready(1-r, w[1-r]); err != nil {
			t.Fatal(err)
		}
		if err := sh[r].Start(s, []int{1 - r}); err != nil {
			t.Fatal(err)
		}
	}

	want := make([]byte, b)
	for i := range want {
		want[i] = byte(i*7 + 3)
	}
	src, err := devs[0].Alloc(b)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := devs[1].Alloc(2 * b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s0.CopyHtoD(src, want); err != nil {
		t.Fatal(err)
	}
	if err := s1.CopyHtoD(recv, make([]byte, 2*b)); err != nil {
		t.Fatal(err)
	}
	// Two pushes of 128 KiB toward offset b of rank 1's recv, their tails
	// (64 KiB each, what Plan.Due gives) staged.
	for k := range 2 {
		lo := k * (b / 2)
		plan.pushed += b / 2
		q := plan.part.Due(plan.pushed, b, k*(64<<10), b/2)
		if q != 64<<10 {
			t.Fatalf("push %d: part %d", k, q)
		}
		if err := sh[0].Stage(1, b+lo+b/2-q, src.Sub(lo+b/2-q, q), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := sh[0].Complete(s0); err != nil {
		t.Fatal(err)
	}
	done := sh[0].DoneMessage(1, 1, nil)
	if len(done) != sh[1].DoneLen(0) || sh[0].DoneLen(1) != 0 {
		t.Fatalf("done message of %d bytes, receiver expects %d (other way %d)", len(done), sh[1].DoneLen(0), sh[0].DoneLen(1))
	}
	if err := sh[1].Receive(s1, recv, [][]byte{done, nil}, []int{0}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2*b)
	if err := s1.CopyDtoH(got, recv); err != nil {
		t.Fatal(err)
	}
	exp := make([]byte, 2*b)
	for k := range 2 {
		lo := k*(b/2) + b/4
		copy(exp[b+lo:b+lo+b/4], want[lo:lo+b/4])
	}
	if !bytes.Equal(got, exp) {
		t.Fatal("rank 1's recv is not the staged tails at their offsets")
	}
	if len(recs) != 2 || fmt.Sprint(recs[0].Segs) != fmt.Sprint(recs[1].Segs) || recs[0].SlotBytes != recs[1].SlotBytes ||
		recs[0].Pushed != b || recs[0].Bytes != b {
		t.Fatalf("tables %+v", recs)
	}
	if len(recs[0].Segs) != 2 {
		t.Fatalf("two pushes' tails with heads between are %d table entries", len(recs[0].Segs))
	}
	recorded := map[int]bool{}
	for _, x := range traces[0] {
		if x.Wait || x.Owner != 0 || x.To != 1 {
			t.Fatalf("rank 0 traced %+v", x)
		}
		recorded[x.Slot] = true
	}
	if len(recorded) != 128<<10/(8<<10) {
		t.Fatalf("rank 0 recorded slots %v, want 16", recorded)
	}
	for _, x := range traces[1] {
		if !x.Wait || !recorded[x.Slot] {
			t.Fatalf("rank 1 waits on slot %+v, which rank 0 did not record", x)
		}
	}
}

// TestShareBadTable: a staging table that does not fit the receiver's
// buffer or staging is refused whole with ErrMismatch, before any copy.
func TestShareBadTable(t *testing.T) {
	sh, devs, _ := pair(t, 1<<20)
	recv, _ := devs[0].Alloc(1 << 20)
	table := func(sb, n int, segs ...int) []byte {
		b := make([]byte, pcie.TableBytes)
		put := func(at, v int) {
			for i := range 8 {
				b[at+i] = byte(uint64(v) >> (8 * i))
			}
		}
		put(8, sb)
		put(16, n)
		for i, v := range segs {
			put(pcie.TableHeader+8*i, v)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		ok   bool
	}{
		{"fits", table(65536, 2, 0, 4096, 8192, 65536), true},
		{"too many entries", table(65536, pcie.MaxSegs+1), false},
		{"zero slot", table(0, 1, 0, 4096), false},
		{"past recv", table(65536, 1, 1<<20-4096, 8192), false},
		{"past staging", table(1<<19, 2, 0, 1<<19, 0, 1<<19+4096), false},
		{"too many slots", table(4096, 1, 0, 17*4096), false},
	} {
		_, _, err := sh[0].ParseTable(1, tc.msg, sh[0].Rx(1), recv)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, errs.ErrMismatch) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
