package direct

import (
	"context"
	"encoding/binary"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/shares"
	"github.com/flexlink/flexlink/gpu"
)

// The plane's staged link shares (fabric/linkshare): the list fabric/shares
// builds from the settings (the PCIe share, the net share riding with it),
// which the plane drives at fixed points of every call (direct.go do)
// without knowing any of them: their words ride in the ready and done
// messages at offsets the list's order gives, and which bytes they carry
// is the call's split (split.go).
type shareList []linkshare.Share

// newShares is the plane's list of shares with settings cfg; the lanes
// (width per group, two groups) and the link counts are the plane's.
func newShares(pr *peers, cfg shares.Config, width int, lanes func() *laneSet, stats *linkStats) (*shares.Set, error) {
	return shares.New(shares.Env{Host: pr.c, Dev: pr.dev, N: pr.n, Me: pr.me, LaneCount: 2 * width,
		Lanes: func(j int) linkshare.Lanes { return lanes().peers[j] },
		Count: func(k, n int) { stats.add(1+k, n) },
		Trace: func(t linkshare.Trace) {
			pr.note(traceRec{actor: pr.me, owner: t.Owner, to: t.To, chunk: -2 - t.Slot, call: t.Call, wait: t.Wait})
		},
	}, cfg)
}

// blobBytes is the shares' part of the setup exchange.
func (l shareList) blobBytes() (n int) {
	for _, sh := range l {
		n += sh.BlobBytes()
	}
	return n
}

// offer writes every share's part of the setup exchange into b.
func (l shareList) offer(ctx context.Context, b []byte) error {
	for _, sh := range l {
		if err := sh.Offer(ctx, b[:sh.BlobBytes()]); err != nil {
			return err
		}
		b = b[sh.BlobBytes():]
	}
	return nil
}

// open opens every share in the list's order from every rank's part of
// the exchange (blobs[r]), agreeing over the plane's host engine.
func (p *directPlane) openShares(ctx context.Context, blobs [][]byte, bus []string) error {
	agree := func(ctx context.Context, mine, all []byte) error {
		return p.c.Engine().AllGather(ctx, collectives.HostBuffer(mine), collectives.HostBuffer(all), len(mine), dtype.Uint8)
	}
	at := 0
	for _, sh := range p.sh {
		n := sh.BlobBytes()
		mine := make([][]byte, len(blobs))
		for r, b := range blobs {
			mine[r] = b[at : at+n]
		}
		if err := sh.Open(ctx, mine, linkshare.Open{Bus: bus, Agree: agree}); err != nil {
			return err
		}
		at += n
	}
	return nil
}

// close closes the shares, the last first (a share may ride with an
// earlier one's pairs).
func (l shareList) close() error {
	var first error
	for k := len(l) - 1; k >= 0; k-- {
		if err := l[k].Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// sharePlan is the call's split as share k reads it (linkshare.Plan).
type sharePlan struct {
	*callPlan
	k int
}

func (sp sharePlan) Bytes() int           { return sp.callPlan.Bytes }
func (sp sharePlan) Part(j int) pcie.Plan { return sp.To[j].Parts[sp.k] }
func (sp sharePlan) Pushed(j int) int     { return sp.To[j].pushed }
func (sp sharePlan) Split(j int) bool     { return sp.To[j].Parts != [maxShares]pcie.Plan{} }

// words is the length of the shares' words in every ready message.
func (l shareList) words() (n int) {
	for _, sh := range l {
		n += sh.Words()
	}
	return n
}

// begin hands every share the call's split.
func (l shareList) begin(peers []int, call uint64, cp *callPlan) {
	for k, sh := range l {
		sh.Begin(peers, call, sharePlan{cp, k})
	}
}

// readyWords writes every share's words of the ready message to peer j
// into w, in the list's order.
func (l shareList) readyWords(j int, w []byte) {
	for _, sh := range l {
		sh.ReadyWords(j, w[:sh.Words()])
		w = w[sh.Words():]
	}
}

// ready hands every share its words of the peers' ready messages (at
// readyAt of in[j]), then starts them on s, which now waits on every
// peer's ready event.
func (l shareList) ready(s *gpu.Stream, in [][]byte, peers []int) error {
	for _, j := range peers {
		w := in[j][readyAt:]
		for _, sh := range l {
			if err := sh.Ready(j, w[:sh.Words()]); err != nil {
				return err
			}
			w = w[sh.Words():]
		}
	}
	for _, sh := range l {
		if err := sh.Start(s, peers); err != nil {
			return err
		}
	}
	return nil
}

// doneMessage appends this rank's done message to peer j to b: the call
// number, then every share's part; n is the length of j's to this rank.
func (l shareList) doneMessage(j int, call uint64, b []byte) (out []byte, n int) {
	b, n = binary.LittleEndian.AppendUint64(b, call), 8
	for _, sh := range l {
		b = sh.DoneMessage(j, call, b)
		n += sh.DoneLen(j)
	}
	return b, n
}

// receive hands every share its parts of the peers' done messages (in[j])
// and lets it copy what they carried into recv.
func (l shareList) receive(s *gpu.Stream, recv *gpu.Buffer, in [][]byte, peers []int) error {
	parts := make([][][]byte, len(l))
	at := make([]int, len(in))
	for k, sh := range l { // every length before any Receive, which forgets what it announced
		parts[k] = make([][]byte, len(in))
		for _, j := range peers {
			n := sh.DoneLen(j)
			parts[k][j], at[j] = in[j][8+at[j]:8+at[j]+n], at[j]+n
		}
	}
	for k, sh := range l {
		if err := sh.Receive(s, recv, parts[k], peers); err != nil {
			return err
		}
	}
	return nil
}

// stage gives each share its part of push x toward peer j (dst's offset
// off in the peer's recv, src the pushed bytes): the first share the tail,
// each next one the bytes before.
func (l shareList) stage(j, off int, x pushPart, src *gpu.Buffer, after *gpu.Event) error {
	at := x.Head()
	for k := len(l) - 1; k >= 0; k-- {
		if n := x.Parts[k]; n > 0 {
			if err := l[k].Stage(j, off+at, src.Sub(at, n), after); err != nil {
				return err
			}
			at += n
		}
	}
	return nil
}

// probe lets every share time the copy lanes as the work joins them.
func (l shareList) probe() error {
	for _, sh := range l {
		if err := sh.Probe(); err != nil {
			return err
		}
	}
	return nil
}

// splitIn fills in's shares and links: every share's spec, and by peer
// the shares this rank's pair toward it has; each share first settles
// its finished timings.
func (l shareList) splitIn(in *splitIn, peers []int, n int) {
	in.Shares = in.Shares[:0]
	for _, sh := range l {
		sh.Settle(peers)
		in.Shares = append(in.Shares, sh.Spec())
	}
	in.Links = make([]pairLinks, n)
	for j := range n {
		for k, sh := range l {
			in.Links[j][k] = sh.Has(j)
		}
	}
}
