package netshare

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric/internal/sharetest"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// netPlan is a split with B bytes and one net part toward every peer.
type netPlan struct {
	b      int
	part   pcie.Plan
	pushed int
}

func (p *netPlan) Bytes() int                 { return p.b }
func (p *netPlan) PCIe(int) (pcie.Plan, bool) { return pcie.Plan{}, p.part.Bytes > 0 }
func (p *netPlan) Net(int) pcie.Plan          { return p.part }
func (p *netPlan) Pushed(int) int             { return p.pushed }

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
	host := sharetest.NewHost()
	var devs [2]*gpu.Device
	var px [2]*pcieshare.Share
	var nx [2]*Share
	pblobs, nblobs := make([][]byte, 2), make([][]byte, 2)
	const staging = 1 << 20
	for r := range 2 {
		devs[r], _ = drv.Device(r)
		px[r] = pcieshare.New(pcieshare.Config{Settings: pcieshare.Settings{Staging: staging, Fixed: -1, MinSlot: 4096},
			Host: host, Dev: devs[r], N: 2, Me: r})
		nx[r] = New(Config{Host: host, Dev: devs[r], N: 2, Me: r, PCIe: px[r], Fixed: -1, Staging: staging,
			OpenNIC: func(hclog.Logger) (net.Provider, int, error) {
				p, err := tcp.New(tcp.Options{IfName: "lo", Timeout: 5 * time.Second})
				return p, 0, err
			}})
		pblobs[r], nblobs[r] = make([]byte, pcieshare.BlobBytes(2)), make([]byte, nx[r].BlobBytes())
		if err := px[r].Offer(pblobs[r]); err != nil {
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
	agree := sharetest.Agree(2)
	sharetest.OnAll(t, 2, func(r int) error {
		sp := nx[r].Spec()
		if err := px[r].Open(ctx, pblobs, []string{"0000:01:00.0", "0000:02:00.0"}, agree[r], &sp); err != nil {
			return err
		}
		return nx[r].Open(ctx, nblobs)
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
		px[r].Begin([]int{1 - r}, 1, plans[r])
		nx[r].Begin([]int{1 - r}, plans[r])
		nx[r].ReadyWords(1-r, w[r][pcieshare.Words:], px[r].ReadyWords(1-r, w[r][:pcieshare.Words]))
	}
	ss := sharetest.Streams(t, devs[0], devs[1])
	for r := range 2 {
		if err := nx[r].Ready(1-r, w[1-r][pcieshare.Words:]); err != nil {
			t.Fatal(err)
		}
		if err := px[r].Ready(ss[r], []int{1 - r}, func(int) []byte { return w[1-r][:pcieshare.Words] }); err != nil {
			t.Fatal(err)
		}
		if err := nx[r].StartOn(ss[r], []int{1 - r}); err != nil {
			t.Fatal(err)
		}
	}
	want := sharetest.Pattern(b, 5, 1)
	src := sharetest.Upload(t, devs[0], ss[0], want)
	recv := sharetest.Upload(t, devs[1], ss[1], make([]byte, 2*b))
	// One push of b bytes into block 1 of rank 1's recv: its last half is
	// the net part (no PCIe part in this call).
	plan.pushed = b
	if err := nx[0].Stage(1, b+b/2, src.Sub(b/2, b/2), nil); err != nil {
		t.Fatal(err)
	}
	sharetest.OnAll(t, 2, func(r int) error {
		if err := nx[r].Complete(ss[r]); err != nil {
			return err
		}
		if err := nx[r].Send(ctx, ss[r], recv, []int{1 - r}); err != nil {
			return err
		}
		return nx[r].Receive(ss[r], recv, nil, []int{1 - r})
	})
	got := sharetest.Download(t, ss[1], recv)
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
