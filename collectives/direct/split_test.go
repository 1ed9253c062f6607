package direct

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/netshare"
	"github.com/flexlink/flexlink/fabric/pcie"
)

const MiB = 1 << 20

// The tests split over the plane's two shares as fabric/shares lists
// them: the PCIe share (the tail of each push), then the net share riding
// with it (the bytes before).
const tPCIe, tNet = 0, 1

// twoShares is their specs (linkshare.Spec, as pcieshare's and netshare's
// Spec give them) with the balancer's fractions.
func twoShares(staging, minSlot, netMinPart int) []linkshare.Spec {
	return []linkshare.Spec{
		{Fixed: -1, Max: pcie.MaxShare, Staging: staging, MinSlot: minSlot},
		{Fixed: -1, MinPart: netMinPart, Max: netshare.MaxShare, Staging: staging, MinSlot: minSlot, Rides: true},
	}
}

// cut is a push's parts: pc bytes over PCIe, nt over net.
func cut(pc, nt int) [maxShares]int { return [maxShares]int{tPCIe: pc, tNet: nt} }

// fixedShares is a balancer that gives every pair the same fractions.
func fixedShares(pc, nt float64) sharesFunc {
	return func(k, _, _ int) float64 { return [2]float64{tPCIe: pc, tNet: nt}[k] }
}

// TestPlanCallGolden: the split of calls worked out by hand (each case's
// comment shows the arithmetic), over the kinds that push, the ones that
// do not, fixed and balancer shares, the net floor, a staging smaller than
// the part, and the staging table's entry limit.
func TestPlanCallGolden(t *testing.T) {
	pcieOnly := []pairLinks{{}, {tPCIe: true}}
	both := []pairLinks{{}, {tPCIe: true, tNet: true}}
	base := func(k plane.Kind, count, me int) splitIn {
		return splitIn{Kind: k, Count: count, Size: 4, N: 2, Me: me, ARMode: "read", ChunkMax: 64 * MiB,
			Links: pcieOnly, Shares: twoShares(64*MiB, 2*MiB, 32*MiB)}
	}
	with := func(in splitIn, f func(*splitIn)) splitIn { f(&in); return in }
	type peerWant struct {
		pcie, net pcie.Plan
		pushes    []pushPart
	}
	for _, tc := range []struct {
		name   string
		in     splitIn
		shares sharesFunc
		bytes  int
		push   pushGeom
		to     map[int]peerWant
	}{
		{
			// B = 4 MiB; PCIe 1/4 of it: 1 MiB in one slot of 1 MiB
			// (64 KiB per slot would do, but slots are at least
			// min(MinSlot, part)); cap 16 slots = 16 MiB.
			name: "allgather rank 0, fixed quarter", in: with(base(plane.AllGather, MiB, 0), func(in *splitIn) { in.Shares[tPCIe].Fixed = 0.25 }),
			bytes: 4 * MiB,
			to:    map[int]peerWant{1: {pcie: pcie.Plan{Bytes: MiB, Cap: 16 * MiB, SlotBytes: MiB}, pushes: []pushPart{{Off: 0, Len: 4 * MiB, Parts: cut(MiB, 0)}}}},
		},
		{
			// The same from rank 1: its block lands at 4 MiB of rank 0's recv.
			name: "allgather rank 1, balancer quarter", in: with(base(plane.AllGather, MiB, 1), func(in *splitIn) { in.Links = []pairLinks{{tPCIe: true}, {}} }), shares: fixedShares(0.25, 0),
			bytes: 4 * MiB,
			to:    map[int]peerWant{0: {pcie: pcie.Plan{Bytes: MiB, Cap: 16 * MiB, SlotBytes: MiB}, pushes: []pushPart{{Off: 4 * MiB, Len: 4 * MiB, Parts: cut(MiB, 0)}}}},
		},
		{
			// Pulls push nothing.
			name: "allgather pulled", in: with(base(plane.AllGather, MiB, 0), func(in *splitIn) { in.Pull = true; in.Shares[tPCIe].Fixed = 0.25 }),
		},
		{
			// (N-1)·4000 bytes < fanOutMin: the pushes stay on the caller's stream.
			name: "alltoall small", in: with(base(plane.AllToAll, 1000, 0), func(in *splitIn) { in.Shares[tPCIe].Fixed = 0.25 }),
		},
		{
			// Rank 1's block: elements [4Mi, 8Mi) = 16 MiB; chunk
			// min(4 MiB, max(16 MiB/8, 1 MiB)) = 2 MiB: 8 pushes. PCIe half:
			// 8 MiB in slots of max(8 MiB/16, 2 MiB) = 2 MiB, cap 32 MiB;
			// each push's running total gives it 1 MiB.
			name: "read allreduce piped, half", in: with(base(plane.AllReduce, 8<<20, 1), func(in *splitIn) {
				in.ChunkMax = 4 * MiB
				in.Shares[tPCIe].Fixed = 0.5
				in.Links = []pairLinks{{tPCIe: true}, {}}
			}),
			bytes: 16 * MiB,
			to: map[int]peerWant{0: {pcie: pcie.Plan{Bytes: 8 * MiB, Cap: 32 * MiB, SlotBytes: 2 * MiB}, pushes: func() (out []pushPart) {
				for k := range 8 {
					out = append(out, pushPart{Off: 16*MiB + k*2*MiB, Len: 2 * MiB, Parts: cut(MiB, 0)})
				}
				return out
			}()}},
		},
		{
			// One chunk holds the whole block: not piped, nothing split.
			name: "read allreduce one chunk", in: with(base(plane.AllReduce, 1<<20, 0), func(in *splitIn) { in.Shares[tPCIe].Fixed = 0.5 }),
		},
		{
			// FLEXLINK_GPU_ALLREDUCE=push: the push allreduce, NVLink only.
			// Block 2 MiB = 512Ki elements; chunk min(16 MiB, max(256 KiB,
			// 4 MiB)) = 4 MiB = 1Mi elements, one chunk per block.
			name: "push allreduce", in: with(base(plane.AllReduce, 1<<20, 0), func(in *splitIn) { in.ARMode = "push"; in.ChunkMax = 16 * MiB; in.Shares[tPCIe].Fixed = 0.5 }),
			push: pushGeom{ok: true, per: 512 << 10, ce: 1 << 20},
		},
		{
			// auto: a 2 MiB block is below pushMinBlock: the read
			// allreduce, and with a 64 KiB chunk max it is piped: 32
			// pushes of 64 KiB.
			name: "auto allreduce small block reads", in: with(base(plane.AllReduce, 1<<20, 0), func(in *splitIn) { in.ARMode = "auto"; in.ChunkMax = 64 << 10 }),
			shares: fixedShares(0, 0), bytes: 2 * MiB,
			to: map[int]peerWant{1: {pushes: func() (out []pushPart) {
				for k := range 32 {
					out = append(out, pushPart{Off: k << 16, Len: 64 << 10})
				}
				return out
			}()}},
		},
		{
			// PCIe 0.2 and net 0.1 of 4 MiB, pages: 204 (835584 B) and 102
			// (417792 B). PCIe slot max(53248, min(2 MiB, part)) = the part.
			// The push: pcie tail 835584, net before it 417792, head the rest.
			name: "pcie and net from the balancer", in: with(base(plane.AllToAll, MiB, 0), func(in *splitIn) { in.Links = both; in.Shares[tNet].MinPart = 0 }),
			shares: fixedShares(0.2, 0.1), bytes: 4 * MiB,
			to: map[int]peerWant{1: {
				pcie:   pcie.Plan{Bytes: 835584, Cap: 16 * 835584, SlotBytes: 835584},
				net:    pcie.Plan{Bytes: 417792, Cap: 16 * 417792, SlotBytes: 417792},
				pushes: []pushPart{{Off: 0, Len: 4 * MiB, Parts: cut(835584, 417792)}},
			}},
		},
		{
			// The balancer's net part (0.4 MB) is under the 32 MiB floor: none.
			name: "net part under the floor", in: with(base(plane.AllToAll, MiB, 0), func(in *splitIn) { in.Links = both }),
			shares: fixedShares(0.2, 0.1), bytes: 4 * MiB,
			to: map[int]peerWant{1: {
				pcie:   pcie.Plan{Bytes: 835584, Cap: 16 * 835584, SlotBytes: 835584},
				pushes: []pushPart{{Off: 0, Len: 4 * MiB, Parts: cut(835584, 0)}},
			}},
		},
		{
			// A fixed net share is not cut by the floor.
			name: "fixed net share", in: with(base(plane.AllToAll, MiB, 0), func(in *splitIn) { in.Links = both; in.Shares[tNet].Fixed = 0.1; in.Shares[tPCIe].Fixed = 0 }),
			bytes: 4 * MiB,
			to: map[int]peerWant{1: {
				net:    pcie.Plan{Bytes: 417792, Cap: 16 * 417792, SlotBytes: 417792},
				pushes: []pushPart{{Off: 0, Len: 4 * MiB, Parts: cut(0, 417792)}},
			}},
		},
		{
			// Staging of 64 KiB under a 2 MiB part: the part is the staging,
			// one slot of it.
			name: "staging smaller than the part", in: with(base(plane.AllGather, MiB, 0), func(in *splitIn) {
				in.Shares[tPCIe].Staging, in.Shares[tNet].Staging = 64<<10, 64<<10
				in.Shares[tPCIe].Fixed = 0.5
			}),
			bytes: 4 * MiB,
			to: map[int]peerWant{1: {pcie: pcie.Plan{Bytes: 64 << 10, Cap: 64 << 10, SlotBytes: 64 << 10},
				pushes: []pushPart{{Off: 0, Len: 4 * MiB, Parts: cut(64<<10, 0)}}}},
		},
		{
			// 256 pushes of 64 KiB, half to PCIe: 32 KiB each, separate
			// table entries (the heads lie between); after pcieMaxSegs
			// (128) entries the table is full and the rest stays on NVLink.
			// Slots: max(8 MiB/16, min(4 KiB, 8 MiB)) = 512 KiB.
			name: "staging table full", in: with(base(plane.AllReduce, 8<<20, 0), func(in *splitIn) {
				in.ChunkMax = 64 << 10
				in.Shares[tPCIe].MinSlot, in.Shares[tNet].MinSlot = 4096, 4096
				in.Shares[tPCIe].Fixed = 0.5
			}),
			bytes: 16 * MiB,
			to: map[int]peerWant{1: {pcie: pcie.Plan{Bytes: 8 * MiB, Cap: 8 * MiB, SlotBytes: 512 << 10}, pushes: func() (out []pushPart) {
				for k := range 256 {
					x := pushPart{Off: k << 16, Len: 64 << 10}
					if k < pcieMaxSegs {
						x.Parts[tPCIe] = 32 << 10
					}
					out = append(out, x)
				}
				return out
			}()}},
		},
		{
			// Three ranks, rank 2 has no staged link: its push is all NVLink.
			name: "three ranks, one pair nvlink only", in: with(base(plane.AllToAll, MiB, 0), func(in *splitIn) {
				in.N, in.Links, in.Shares[tPCIe].Fixed = 3, []pairLinks{{}, {tPCIe: true}, {}}, 0.25
			}),
			bytes: 4 * MiB,
			to: map[int]peerWant{
				1: {pcie: pcie.Plan{Bytes: MiB, Cap: 16 * MiB, SlotBytes: MiB}, pushes: []pushPart{{Off: 0, Len: 4 * MiB, Parts: cut(MiB, 0)}}},
				2: {pushes: []pushPart{{Off: 0, Len: 4 * MiB}}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			shares := func(k, j, b int) float64 {
				asked++
				if tc.shares == nil {
					t.Fatalf("the balancer was asked (peer %d, %d bytes) though the shares are fixed", j, b)
				}
				if b != tc.bytes {
					t.Errorf("the balancer was asked about %d bytes, the call pushes %d", b, tc.bytes)
				}
				return tc.shares(k, j, b)
			}
			got := planCall(tc.in, shares)
			if got.Bytes != tc.bytes || got.Push != tc.push {
				t.Fatalf("bytes %d push %+v, want %d %+v", got.Bytes, got.Push, tc.bytes, tc.push)
			}
			if len(got.To) != tc.in.N {
				t.Fatalf("%d peers in the plan, want %d", len(got.To), tc.in.N)
			}
			for j, ps := range got.To {
				w, ok := tc.to[j]
				if !ok {
					if ps.Parts != ([maxShares]pcie.Plan{}) || len(ps.Pushes) != 0 {
						t.Errorf("peer %d: %+v, want nothing", j, ps)
					}
					continue
				}
				if ps.Parts != [maxShares]pcie.Plan{tPCIe: w.pcie, tNet: w.net} {
					t.Errorf("peer %d: parts %+v, want pcie %+v net %+v", j, ps.Parts, w.pcie, w.net)
				}
				if !reflect.DeepEqual(ps.Pushes, w.pushes) {
					t.Errorf("peer %d: pushes\n%v\nwant\n%v", j, ps.Pushes, w.pushes)
				}
			}
			if tc.shares != nil && tc.bytes > 0 && asked == 0 {
				t.Errorf("the balancer was never asked")
			}
		})
	}
}

// TestPlanCallAddsUp: on random calls, the pushes toward each peer carry
// B, every push's parts lie inside it (head ≥ 0), no part exceeds its
// plan, a one-push call (allgather, alltoall) stages exactly the plan, and
// a chunked one (allreduce) falls short of it by less than its last push
// while the staging table has room.
func TestPlanCallAddsUp(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	kinds := []plane.Kind{plane.AllReduce, plane.AllGather, plane.AllToAll}
	for i := range 400 {
		in := splitIn{Kind: kinds[rng.Intn(len(kinds))], Count: 1 + rng.Intn(16<<20), Size: 1 << rng.Intn(4),
			N: 2 + rng.Intn(4), ARMode: "read", ChunkMax: 64<<10 + rng.Intn(32*MiB),
			Shares: twoShares(4096*(8+rng.Intn(32<<10)), 4096<<rng.Intn(10), 0)}
		in.Me = rng.Intn(in.N)
		in.Links = make([]pairLinks, in.N)
		for j := range in.Links {
			in.Links[j] = pairLinks{tPCIe: rng.Intn(4) > 0, tNet: rng.Intn(2) > 0}
		}
		pc, nt := rng.Float64()*0.6, rng.Float64()*0.6
		cp := planCall(in, fixedShares(pc, nt))
		name := fmt.Sprintf("case %d %+v shares %.3f %.3f", i, in, pc, nt)
		for j, ps := range cp.To {
			if j == in.Me || cp.Bytes == 0 {
				continue
			}
			total, pcs, nts := 0, 0, 0
			for _, x := range ps.Pushes {
				if x.Head() < 0 || x.Parts[tPCIe] < 0 || x.Parts[tNet] < 0 {
					t.Fatalf("%s: peer %d: push %+v has negative parts", name, j, x)
				}
				total, pcs, nts = total+x.Len, pcs+x.Parts[tPCIe], nts+x.Parts[tNet]
			}
			if total != cp.Bytes {
				t.Fatalf("%s: peer %d: pushes carry %d bytes, B is %d", name, j, total, cp.Bytes)
			}
			if !in.Links[j][tPCIe] && pcs+nts != 0 || !in.Links[j][tNet] && nts != 0 {
				t.Fatalf("%s: peer %d: staged parts on a pair without the link", name, j)
			}
			pp, np := ps.Parts[tPCIe], ps.Parts[tNet]
			if pcs > pp.Bytes || nts > np.Bytes {
				t.Fatalf("%s: peer %d: parts %d pcie %d net beyond the plans %+v %+v", name, j, pcs, nts, pp, np)
			}
			short := 0
			if n := len(ps.Pushes); n > 1 {
				short = ps.Pushes[n-1].Len
			}
			short1, short2 := pp.Bytes-pcs, np.Bytes-nts
			if len(ps.Pushes) <= pcieMaxSegs && (short1 > 0 && short1 >= short || short2 > 0 && short2 >= short) {
				t.Fatalf("%s: peer %d: parts %d pcie %d net fall short of the plans %+v %+v", name, j, pcs, nts, pp, np)
			}
			if pp.Bytes > cp.Bytes/2 || np.Bytes > cp.Bytes/2 || pp.Bytes > in.Shares[tPCIe].Staging {
				t.Fatalf("%s: peer %d: plans %+v %+v beyond half of %d or the staging", name, j, pp, np, cp.Bytes)
			}
		}
	}
}

// TestSplitTake: the pushes must come as planned; anything else is
// refused, so a wrong plan never stages wrong bytes.
func TestSplitTake(t *testing.T) {
	in := splitIn{Kind: plane.AllGather, Count: MiB, Size: 4, N: 3, Me: 1, ChunkMax: 64 * MiB,
		Links: []pairLinks{{tPCIe: true}, {}, {tPCIe: true}}, Shares: twoShares(64*MiB, 2*MiB, 0)}
	in.Shares[tPCIe].Fixed = 0.25
	cp := planCall(in, nil)
	if _, err := cp.take(0, 0, 4*MiB); err == nil {
		t.Fatal("a push at the wrong offset was taken")
	}
	x, err := cp.take(0, 4*MiB, 4*MiB)
	if err != nil || x.Parts[tPCIe] != MiB || cp.To[0].pushed != 4*MiB {
		t.Fatalf("take: %+v, %v, pushed %d", x, err, cp.To[0].pushed)
	}
	if _, err := cp.take(0, 4*MiB, 4*MiB); err == nil {
		t.Fatal("a push beyond the plan was taken")
	}
	if _, err := cp.take(2, 4*MiB, 2*MiB); err == nil {
		t.Fatal("a push of the wrong length was taken")
	}
}
