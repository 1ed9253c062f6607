package netshare

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

type testHost struct{ done chan struct{} }

func (testHost) Log() hclog.Logger          { return hclog.NewNullLogger() }
func (testHost) Host() string               { return "fakehost" }
func (testHost) PeerHost(int) string        { return "fakehost" }
func (testHost) Name() string               { return "test" }
func (testHost) ID() uint64                 { return 7 }
func (testHost) JobErr() error              { return nil }
func (h testHost) JobDone() <-chan struct{} { return h.done }
func (testHost) JobAuth() ([]byte, string)  { return []byte("netshare-test"), "job" }

// netPlan is a split with B bytes and one net part toward every peer, as
// the net share reads it.
type netPlan struct {
	b      int
	part   pcie.Plan
	pushed int
}

func (p *netPlan) Bytes() int         { return p.b }
func (p *netPlan) Part(int) pcie.Plan { return p.part }
func (p *netPlan) Split(int) bool     { return p.part.Bytes > 0 }
func (p *netPlan) Pushed(int) int     { return p.pushed }

// pciePlan is the same split as the PCIe share reads it: no PCIe part.
type pciePlan struct{ *netPlan }

func (pciePlan) Part(int) pcie.Plan { return pcie.Plan{} }

// The net share is a link share.
var _ linkshare.Share = (*Share)(nil)

// onBoth runs f for ranks 0 and 1 at once and fails on either's error.
func onBoth(t *testing.T, f func(r int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestShareCall: two ranks on two fake GPUs set up their PCIe pairs and
// the net share riding with them over tcp on loopback (listeners, proved
// hellos, the setup probe that gives each pair's planner the net link's
// profile), then move one call's net part from rank 0 to rank 1 as the
// plane drives it: the staged bytes land in rank 1's recv at their
// offset and nowhere else, and both sides see the same table.
func TestShareCall(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	host := testHost{done: make(chan struct{})}
	var devs [2]*gpu.Device
	var px [2]*pcieshare.Share
	var nx [2]*Share
	pblobs, nblobs := make([][]byte, 2), make([][]byte, 2)
	const staging = 1 << 20
	for r := range 2 {
		devs[r], _ = drv.Device(r)
		px[r] = pcieshare.New(pcieshare.Config{Settings: pcieshare.Settings{Staging: staging, Fixed: -1, MinSlot: 4096},
			Host: host, Dev: devs[r], N: 2, Me: r})
		nr := r
		px[r].Rider = func() *balance.LinkSpec { sp := nx[nr].LinkSpec(); return &sp }
		nx[r] = New(Config{Host: host, Dev: devs[r], N: 2, Me: r, PCIe: px[r], Fixed: -1, Staging: staging,
			OpenNIC: func(hclog.Logger) (net.Provider, int, error) {
				p, err := tcp.New(tcp.Options{IfName: "lo", Timeout: 5 * time.Second})
				return p, 0, err
			}})
		pblobs[r], nblobs[r] = make([]byte, px[r].BlobBytes()), make([]byte, nx[r].BlobBytes())
		if err := px[r].Offer(ctx, pblobs[r]); err != nil {
			t.Fatal(err)
		}
		if err := nx[r].Offer(ctx, nblobs[r]); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for r := range 2 {
			nx[r].Close()
			px[r].Close()
		}
	}()
	agreed := make(chan []byte, 2)
	var once sync.Once
	all := make([]byte, 4)
	ready := make(chan struct{})
	onBoth(t, func(r int) error {
		agree := func(ctx context.Context, mine, out []byte) error {
			agreed <- append([]byte{byte(r)}, mine...)
			once.Do(func() {
				go func() {
					for range 2 {
						m := <-agreed
						copy(all[2*int(m[0]):], m[1:])
					}
					close(ready)
				}()
			})
			select {
			case <-ready:
				copy(out, all)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		o := linkshare.Open{Bus: []string{"0000:01:00.0", "0000:02:00.0"}, Agree: agree}
		if err := px[r].Open(ctx, pblobs, o); err != nil {
			return err
		}
		return nx[r].Open(ctx, nblobs, o)
	})
	for r := range 2 {
		if !nx[r].Has(1-r) || px[r].Tx(1-r).Rider == nil || len(px[r].Tx(1-r).Planner.Links()) != 3 {
			t.Fatalf("rank %d: no net part toward its peer, or its planner lacks the net link", r)
		}
	}

	const b = 64 << 10
	plan := &netPlan{b: b, part: pcie.Size(b, 0.5, staging, 4096)}
	if plan.part.Bytes != 32<<10 || plan.part.SlotBytes != 4096 {
		t.Fatalf("plan %+v", plan.part)
	}
	idle := &netPlan{}
	var mu sync.Mutex
	var recs []pcieshare.SplitRec
	for r := range 2 {
		nx[r].OnSplit = func(x pcieshare.SplitRec) { mu.Lock(); recs = append(recs, x); mu.Unlock() }
	}
	plans := [2]*netPlan{plan, idle}
	w := [2][]byte{make([]byte, pcieshare.Words+Words), make([]byte, pcieshare.Words+Words)}
	for r := range 2 {
		px[r].Begin([]int{1 - r}, 1, pciePlan{plans[r]})
		nx[r].Begin([]int{1 - r}, 1, plans[r])
		px[r].ReadyWords(1-r, w[r][:pcieshare.Words])
		nx[r].ReadyWords(1-r, w[r][pcieshare.Words:])
	}
	var ss [2]*gpu.Stream
	for r := range 2 {
		if ss[r], err = devs[r].NewStream(); err != nil {
			t.Fatal(err)
		}
		for _, sh := range []linkshare.Share{px[r], nx[r]} { // as the plane: every share reads, then every share starts
			at := 0
			if sh == linkshare.Share(nx[r]) {
				at = pcieshare.Words
			}
			if err := sh.Ready(1-r, w[1-r][at:at+sh.Words()]); err != nil {
				t.Fatal(err)
			}
		}
		for _, sh := range []linkshare.Share{px[r], nx[r]} {
			if err := sh.Start(ss[r], []int{1 - r}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := make([]byte, b)
	for i := range want {
		want[i] = byte(i*5 + 1)
	}
	src, err := devs[0].Alloc(b)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := devs[1].Alloc(2 * b)
	if err != nil {
		t.Fatal(err)
	}
	if err := ss[0].CopyHtoD(src, want); err != nil {
		t.Fatal(err)
	}
	if err := ss[1].CopyHtoD(recv, make([]byte, 2*b)); err != nil {
		t.Fatal(err)
	}
	// One push of b bytes into block 1 of rank 1's recv: its last half is
	// the net part (no PCIe part in this call).
	plan.pushed = b
	if err := nx[0].Stage(1, b+b/2, src.Sub(b/2, b/2), nil); err != nil {
		t.Fatal(err)
	}
	onBoth(t, func(r int) error {
		if err := nx[r].Complete(ss[r]); err != nil {
			return err
		}
		if err := nx[r].Send(ctx, ss[r], recv, []int{1 - r}); err != nil {
			return err
		}
		return nx[r].Receive(ss[r], recv, nil, []int{1 - r})
	})
	got := make([]byte, 2*b)
	if err := ss[1].CopyDtoH(got, recv); err != nil {
		t.Fatal(err)
	}
	exp := make([]byte, 2*b)
	copy(exp[b+b/2:], want[b/2:])
	if !bytes.Equal(got, exp) {
		t.Fatal("rank 1's recv is not the net part at its offset")
	}
	if len(recs) != 2 || fmt.Sprint(recs[0].Segs) != fmt.Sprint(recs[1].Segs) || recs[0].SlotBytes != recs[1].SlotBytes {
		t.Fatalf("tables %+v", recs)
	}
	if fmt.Sprint(recs[0].Segs) != fmt.Sprint([]pcie.Seg{{Off: b + b/2, N: b / 2}}) {
		t.Fatalf("table %v", recs[0].Segs)
	}
}
