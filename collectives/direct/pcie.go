package direct

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/netshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu"
)

// The plane's staged link shares: the PCIe share (fabric/pcieshare) and
// the net part riding with its pairs (netpart.go). Each is driven through
// linkShare in every call (direct.go do); their words ride in the plane's
// ready and done messages; which bytes they carry is the call's split
// (split.go).

// linkShare is a staged share of large pushes as a call drives it:
//
//	Stage     during the work: a push's part toward peer (its bytes at
//	          offset off of the peer's recv), staged D2H after after
//	Probe     as the work joins the copy lanes: time the timed pushes' lanes
//	Complete  after the work: seal the parts, s waits for their D2H copies
//	Send      then, before the done handshake: move what the wire carries
//	Receive   after the done handshake (done[j]: peer j's done message):
//	          the peers' parts H2D into recv, s waits for them
type linkShare interface {
	Stage(peer, off int, src *gpu.Buffer, after *gpu.Event) error
	Probe() error
	Complete(s *gpu.Stream) error
	Send(ctx context.Context, s *gpu.Stream, recv *gpu.Buffer, peers []int) error
	Receive(s *gpu.Stream, recv *gpu.Buffer, done [][]byte, peers []int) error
}

var (
	_ linkShare = (*pcieshare.Share)(nil)
	_ linkShare = (*netshare.Share)(nil)
)

// The staging machinery's constants (fabric/pcie).
const (
	pcieMaxSegs  = pcie.MaxSegs  // entries of a staging table
	pcieAlign    = pcie.Align    // PCIe parts and slots are whole pages
	pcieMinSlot  = pcie.MinSlot  // bytes: smaller copies lose PCIe bandwidth to per-copy cost
	pcieMaxShare = pcie.MaxShare // a PCIe part never exceeds half a push, whatever was measured
)

// newPCIe is the plane's PCIe share with settings st; the lanes (width
// per group, two groups) and the link counts are the plane's.
func newPCIe(pr *peers, st pcieshare.Settings, width int, lanes func() *laneSet, stats *linkStats) *pcieshare.Share {
	return pcieshare.New(pcieshare.Config{
		Settings: st, Host: pr.c, Dev: pr.dev, N: pr.n, Me: pr.me, LaneCount: 2 * width,
		Lanes: func(j int) pcieshare.Lanes { return lanes().peers[j] },
		Count: func(n int) { stats.add(linkPCIe, n) },
		Trace: func(t pcieshare.Trace) {
			pr.note(traceRec{actor: pr.me, owner: t.Owner, to: t.To, chunk: -2 - t.Slot, call: t.Call, wait: t.Wait})
		},
	})
}

// openPCIe is the PCIe share's Open, agreeing over the plane's host
// engine, with the net part's link when it is on.
func (p *directPlane) openPCIe(ctx context.Context, blobs [][]byte, bus []string) error {
	agree := func(ctx context.Context, mine, all []byte) error {
		return p.c.Engine().AllGather(ctx, collectives.HostBuffer(mine), collectives.HostBuffer(all), len(mine), dtype.Uint8)
	}
	var rider *balance.LinkSpec
	if p.nx != nil {
		sp := p.nx.Spec()
		rider = &sp
	}
	return p.px.Open(ctx, blobs, bus, agree, rider)
}

// pcieSettings reads FLEXLINK_LINKS, FLEXLINK_PCIE_STAGING_BYTES and
// FLEXLINK_PCIE_SHARE. The PCIe share is on unless FLEXLINK_LINKS names
// link kinds and pcie is not among them, or the staging size is 0.
func pcieSettings(cfg PCIeConfig) (pcieshare.Settings, error) {
	st := pcieshare.Settings{Fixed: cfg.Share, MinSlot: pcieMinSlot, CacheDir: cfg.CacheDir}
	kinds, err := namedKinds(cfg.Links)
	if err != nil {
		return st, err
	}
	if kinds[fabric.KindPCIe] && !kinds[fabric.KindNVLink] {
		return st, fmt.Errorf("FLEXLINK_LINKS=%q names pcie without nvlink: the direct GPU path adds pcie to nvlink (name both, or set FLEXLINK_GPU_PATH=staged)",
			cfg.Links)
	}
	if kinds[fabric.KindPCIe] {
		st.Staging = pcie.RoundStaging(cfg.StagingBytes)
	}
	return st, nil
}

// namedKinds is the set of link kinds FLEXLINK_LINKS keeps, every kind
// when it is empty. FilterLinks checks the names, so a typo is an error
// here as everywhere else; host kinds (shm,tcp) are legal and simply keep
// no GPU link beyond NVLink.
func namedKinds(links string) (map[fabric.Kind]bool, error) {
	all := []fabric.Kind{fabric.KindNVLink, fabric.KindPCIe, fabric.KindNet, fabric.KindShm, fabric.KindTCP, fabric.KindFake}
	specs := make([]balance.LinkSpec, len(all))
	for i, k := range all {
		specs[i] = balance.LinkSpec{ID: i, Kind: k, Bandwidth: 1}
	}
	kept, err := balance.FilterLinksBy(specs, links)
	if err != nil {
		return nil, fmt.Errorf("gpu links: %w", err)
	}
	out := map[fabric.Kind]bool{}
	for _, s := range kept {
		out[s.Kind] = true
	}
	if !out[fabric.KindNVLink] && !out[fabric.KindPCIe] {
		out[fabric.KindNVLink] = true // FLEXLINK_LINKS=shm,tcp: about host links only
	}
	return out, nil
}

// sharePlan is the call's split as the shares read it (pcieshare.Plan).
type sharePlan struct{ *callPlan }

func (sp sharePlan) Bytes() int { return sp.callPlan.Bytes }

func (sp sharePlan) PCIe(j int) (pcie.Plan, bool) {
	return sp.To[j].PCIe, sp.To[j].Net.Bytes > 0
}

func (sp sharePlan) Net(j int) pcie.Plan { return sp.To[j].Net }

func (sp sharePlan) Pushed(j int) int { return sp.To[j].pushed }

// shares are the staged shares a call drives: the PCIe share and, when on,
// the net part.
func (p *directPlane) shares() []linkShare {
	if p.nx == nil {
		return []linkShare{p.px}
	}
	return []linkShare{p.px, p.nx}
}

// links is, by peer, the staged links this rank's pair toward it has
// (planCall's Links; nil when no pair has PCIe).
func (p *directPlane) links() []pairLinks {
	if !p.px.On() {
		return nil
	}
	out := make([]pairLinks, p.n)
	for j := range out {
		if p.px.Tx(j) != nil {
			out[j] = pairLinks{PCIe: true, Net: p.nx.Has(j)}
		}
	}
	return out
}

// readyShares reads the shares' words of the peers' ready messages (the
// net words first: the PCIe share's probe asks whether a net part comes)
// and starts their timings on s, which now waits on every peer's ready
// event.
func (p *directPlane) readyShares(s *gpu.Stream, in [][]byte, peers []int) error {
	for _, j := range peers {
		if err := p.nx.Ready(j, in[j][pcieAt+pcieWords:readyHeader]); err != nil {
			return err
		}
	}
	if err := p.px.Ready(s, peers, func(j int) []byte { return in[j][pcieAt : pcieAt+pcieWords] }); err != nil {
		return err
	}
	return p.nx.StartOn(s, peers)
}
