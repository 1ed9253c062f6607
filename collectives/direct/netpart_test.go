package direct

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu/gpufake"

	"github.com/flexlink/flexlink/fabric/netshare"
)

// The net part (netpart*.go) on the fake driver: the bytes between the
// two pinned staging buffers go over the tcp provider on loopback. These
// tests check that every collective that pushes stays exact with a net
// part, that both ends agree on every staging table and the shares add up
// to the bytes moved, that the balancer learns the net link's rate (a
// share while it pays, about none when it is far slower than NVLink), and
// that a peer that dies during a net part fails the call naming it.

// netEnv is env with the net part on, over tcp on loopback.
func netEnv(env map[string]string) map[string]string {
	out := map[string]string{"FLEXLINK_LINKS": "nvlink,pcie,net", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "lo",
		"FLEXLINK_NET_TIMEOUT": "5s"}
	maps.Copy(out, env)
	return out
}

// attachNet logs the net part's tables of every rank (and lowers its
// smallest slot with the PCIe part's, whose minSlot it uses).
func (l *splitLog) attachNet(rs []*devRank, minSlot int) {
	for _, r := range rs {
		pl := r.dc.Plane().(*directPlane)
		pl.px().MinSlot = minSlot
		pl.nx().OnSplit = l.record
	}
}

// TestGPUFakeNetSplit: the sweep of every collective is exact with net
// shares of 0.08 to 0.5 beside PCIe shares of 0 to 0.25, with staging
// smaller than the parts, on 2 and 3 ranks, with copy-engine pushes and
// with store kernels, over loopback and over the host's first NIC; sender and receiver agree on every net table, each
// part is its share of the push, and after an allgather LinkShares adds
// up to 1, with the net share where it was put and equal to the bytes the
// net tables staged.
func TestGPUFakeNetSplit(t *testing.T) {
	for _, tc := range []struct {
		n                   int
		pcieShare, netShare string
		staging             int
		lanes, mode         string
		ifname              string // "": the host's first NIC (loopback where it has no other)
	}{
		{2, "0.08", "0.25", 64 << 20, "1", "push", "lo"}, {3, "0.25", "0.5", 64 << 10, "2", "push", "lo"},
		{2, "0", "0.08", 32 << 10, "1", "push", "lo"}, {2, "0.08", "0.25", 64 << 20, "1", "store", ""},
	} {
		t.Run(fmt.Sprintf("%dranks-pcie%s-net%s-staging%d-%s", tc.n, tc.pcieShare, tc.netShare, tc.staging, tc.mode), func(t *testing.T) {
			env := netEnv(map[string]string{"FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_GPU_COPY_STREAMS": tc.lanes,
				"FLEXLINK_PCIE_SHARE": tc.pcieShare, "FLEXLINK_GPU_NET_SHARE": tc.netShare,
				"FLEXLINK_GPU_ALLGATHER": tc.mode, "FLEXLINK_GPU_ALLTOALL": tc.mode, "FLEXLINK_NET_IFNAME": tc.ifname,
				"FLEXLINK_PCIE_STAGING_BYTES": fmt.Sprint(tc.staging)})
			rs := fakeRanks(t, tc.n, gpufake.Config{}, env, tc.n*fakeBig*8)
			var pcieLog, netLog splitLog
			pcieLog.attach(rs, 4096)
			netLog.attachNet(rs, 4096)
			sweep(t, rs, devCases(tc.n, fakeBig))
			var ps, ns float64
			fmt.Sscan(tc.pcieShare, &ps)
			fmt.Sscan(tc.netShare, &ns)
			pcieLog.check(t, ps, tc.staging)
			if staged := netLog.check(t, ns, tc.staging); staged == 0 {
				t.Fatalf("net share %g: nothing staged", ns)
			}
			ctx := testCtx(t, 20*time.Second)
			netLog.recs = nil
			errs := onRanks(rs, func(r *devRank) error {
				return r.dc.AllGather(ctx, r.a.Sub(0, fakeBig*4), r.b.Sub(0, tc.n*fakeBig*4), fakeBig, dtype.Float32, r.s)
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for _, r := range rs {
				ls := r.dc.LinkShares()
				sum := ls["nvlink"] + ls["pcie"] + ls["net"]
				wantNet := min(ns, float64(tc.staging)/float64(fakeBig*4))
				if sum < 0.999 || sum > 1.001 || ls["net"] < wantNet-0.02 || ls["net"] > wantNet+0.01 {
					t.Errorf("rank %d: LinkShares %v after an allgather with net share %g (want net near %.3f, sum 1)",
						r.c.Rank(), ls, ns, wantNet)
				}
				staged := 0
				for _, x := range netLog.recs {
					for _, sg := range x.Segs {
						if x.From == r.c.Rank() && !x.Receiver {
							staged += sg.N
						}
					}
				}
				if moved := float64((tc.n - 1) * fakeBig * 4); math.Abs(ls["net"]*moved-float64(staged)) > 1 {
					t.Errorf("rank %d: net share %v of %g bytes pushed, but the net tables staged %d", r.c.Rank(), ls["net"], moved, staged)
				}
			}
		})
	}
}

// TestGPUFakeNetSettings: FLEXLINK_LINKS without net keeps the net part
// off (no provider, no "net" in LinkShares), net without pcie is refused
// on every rank naming the variable, and so is a kind that does not exist;
// a NIC that is not there fails the setup on every rank.
func TestGPUFakeNetSettings(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		for _, links := range []string{"", "nvlink,pcie"} {
			rs := fakeRanks(t, 2, gpufake.Config{}, map[string]string{"FLEXLINK_LINKS": links, "FLEXLINK_GPU_NET_SHARE": "0.5"}, 2*fakeBig*8)
			if pl := rs[0].dc.Plane().(*directPlane); pl.nx() != nil || pl.px().Tx(1).Rider != nil {
				t.Fatalf("FLEXLINK_LINKS=%q: the net part is on", links)
			}
			sweep(t, rs, []devCase{{kind: plane.AllGather, count: fakeBig, dt: dtype.Float32}})
			if ls := rs[0].dc.LinkShares(); len(ls) != 2 || ls["nvlink"] < 0.5 {
				t.Fatalf("FLEXLINK_LINKS=%q: LinkShares %v, want nvlink and pcie only", links, ls)
			}
		}
	})
	for name, c := range map[string]struct{ links, ifname, want string }{
		"net-without-pcie": {"nvlink,net", "lo", `FLEXLINK_LINKS="nvlink,net" names net without nvlink and pcie`},
		"bogus":            {"nvlink,pcie,nic", "lo", `FLEXLINK_LINKS="nvlink,pcie,nic"`},
		"no-nic":           {"nvlink,pcie,net", "=nosuchnic", `FLEXLINK_NET_IFNAME`},
	} {
		t.Run(name, func(t *testing.T) {
			errs := fakeSetupErrors(t, netEnv(map[string]string{"FLEXLINK_LINKS": c.links, "FLEXLINK_NET_IFNAME": c.ifname}))
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("rank %d: %v, want an error containing %s", r, err, c.want)
				}
			}
		})
	}
}

// emulateRates makes every observation fed to the ranks' planners take
// what links of these rates (bytes/s, 1 µs each) would take.
func emulateRates(rs []*devRank, rates map[int]float64) {
	for _, r := range rs {
		r.dc.Plane().(*directPlane).px().Emulate = func(_ int, obs []balance.Observation) {
			for i, o := range obs {
				obs[i].Duration = time.Microsecond + time.Duration(float64(o.Bytes)/rates[o.Link]*1e9)
			}
		}
	}
}

// forceNetProbe gives every pair a fresh planner whose net prior is as
// fast as PCIe, so the balancer tries the net link on the first large
// push whatever it will measure. Its latencies and split overhead are
// small, so that pushes of a few MiB (fast on the fake driver) split.
func forceNetProbe(t *testing.T, rs []*devRank) {
	specs := []balance.LinkSpec{
		{ID: linkNVLink, Kind: fabric.KindNVLink, Bandwidth: pcieshare.NVLinkPriorBW, Latency: time.Microsecond},
		{ID: linkPCIe, Kind: fabric.KindPCIe, Bandwidth: pcieshare.PCIePriorBW, Latency: time.Microsecond},
		{ID: linkNet, Kind: fabric.KindNet, Bandwidth: pcieshare.PCIePriorBW, Latency: time.Microsecond},
	}
	for _, r := range rs {
		r.dc.Plane().(*directPlane).nx().MinPart = 0 // the test's pushes are 4 MiB
		for j := range r.c.Size() {
			tx := r.dc.Plane().(*directPlane).px().Tx(j)
			if tx == nil {
				continue
			}
			pl, err := balance.NewPlanner(specs, nil, balance.Config{SplitOverhead: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
			tx.Planner = pl
		}
	}
}

// TestGPUFakeNetBalancer: with the balancer deciding, a net link forced
// to be probed gets a share of the first large push; timings that show it
// far slower than NVLink (emulated: 1 GB/s against 391) take its share to
// about none within a few calls, while one as fast as PCIe keeps a share.
// Every call stays exact, and LinkShares adds up to 1 throughout.
func TestGPUFakeNetBalancer(t *testing.T) {
	const big = 1 << 20 // float32 per rank: 4 MiB pushes, above the forced planner's threshold
	for _, tc := range []struct {
		name    string
		netRate float64
		lo, hi  float64 // the last call's net share
	}{
		{"slow", 1e9, 0, 0.01},
		{"fast", 50e9, 0.03, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := fakeRanks(t, 2, gpufake.Config{}, netEnv(nil), 2*big*4)
			forceNetProbe(t, rs)
			if thr := rs[0].dc.Plane().(*directPlane).px().Tx(1).Planner.Threshold(); thr >= big*4 {
				t.Fatalf("threshold %d bytes: the test assumes it below %d", thr, big*4)
			}
			emulateRates(rs, map[int]float64{linkNVLink: 391e9, linkPCIe: 50e9, linkNet: tc.netRate})
			c := devCase{kind: plane.AllGather, count: big, dt: dtype.Float32}
			var first, last map[string]float64
			const calls = 12
			for i := range calls {
				sweep(t, rs, []devCase{c})
				ls := rs[0].dc.LinkShares()
				if sum := ls["nvlink"] + ls["pcie"] + ls["net"]; sum < 0.999 || sum > 1.001 {
					t.Fatalf("call %d: LinkShares %v do not add up to 1", i, ls)
				}
				if i == 0 {
					first = ls
				}
				last = ls
			}
			if first["net"] < 0.02 {
				t.Fatalf("first call: LinkShares %v, want a net share (the probe was forced)", first)
			}
			if last["net"] < tc.lo || last["net"] > tc.hi {
				t.Fatalf("after %d calls at %g B/s: LinkShares %v, want net in [%g, %g]", calls, tc.netRate, last, tc.lo, tc.hi)
			}
			for _, r := range rs {
				if tx := r.dc.Plane().(*directPlane).px().Tx(1 - r.c.Rank()); tx.Observed < 3 {
					t.Errorf("rank %d: %d observations in %d calls", r.c.Rank(), tx.Observed, calls)
				}
			}
			t.Logf("net at %g B/s: first call %v, last %v", tc.netRate, first, last)
		})
	}
}

// TestGPUFakeNetMinPart: with the planner giving net a share of 4 MiB
// pushes (probe forced, as above) but the default smallest part
// (netMinPart, 32 MiB), no call sends a net part: parts that small cost
// more in fixed host work than they move. A fixed FLEXLINK_GPU_NET_SHARE
// is not cut (TestGPUFakeNetSplit).
func TestGPUFakeNetMinPart(t *testing.T) {
	const big = 1 << 20
	rs := fakeRanks(t, 2, gpufake.Config{}, netEnv(nil), 2*big*4)
	forceNetProbe(t, rs)
	for _, r := range rs {
		r.dc.Plane().(*directPlane).nx().MinPart = netshare.DefaultMinPart
	}
	for i := range 3 {
		sweep(t, rs, []devCase{{kind: plane.AllGather, count: big, dt: dtype.Float32}})
		if ls := rs[0].dc.LinkShares(); ls["net"] != 0 {
			t.Fatalf("call %d: LinkShares %v, want no net part under %d bytes", i, ls, netshare.DefaultMinPart)
		}
	}
}

// TestGPUFakeNetPeerDies: rank 1 dies (its sockets close, it sends
// nothing more) as its net parts are about to go out, or after the first
// slot of one went; ranks 0 and 2, in the same call, fail within seconds
// with errors naming rank 1 and the net link instead of waiting for the
// deadline.
func TestGPUFakeNetPeerDies(t *testing.T) {
	for _, tc := range []struct {
		op    plane.Kind
		where string
	}{
		{plane.AllGather, "send"}, {plane.AllToAll, "send"}, {plane.AllReduce, "send"},
		{plane.AllGather, "slot"}, {plane.AllReduce, "slot"},
	} {
		op := tc.op
		t.Run(op.String()+"-"+tc.where, func(t *testing.T) {
			env := netEnv(map[string]string{"FLEXLINK_GPU_NET_SHARE": "0.25", "FLEXLINK_GPU_CHUNK_BYTES": "65536"})
			rs := fakeRanks(t, 3, gpufake.Config{}, env, 3*fakeBig*8)
			for _, r := range rs {
				r.dc.Plane().(*directPlane).px().MinSlot = 4096 // parts of several slots
			}
			dead := make(chan struct{})
			var once sync.Once
			released := make(chan struct{})
			t.Cleanup(func() { once.Do(func() { close(released) }) })
			nx := rs[1].dc.Plane().(*directPlane).nx()
			seen := 0
			nx.Fault = func(at string, peer int) error {
				if at != tc.where {
					return nil
				}
				if seen++; at == "slot" && seen < 2 {
					return nil // the first slot goes out
				}
				nx.Provider().Close() // what the kernel does to a dead process's sockets
				close(dead)
				<-released // and it does nothing more
				return errors.New("rank 1 died")
			}
			ctx := testCtx(t, 30*time.Second)
			errs := make([]error, 3)
			took := make([]time.Duration, 3)
			var wg sync.WaitGroup
			for _, r := range []int{0, 2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					_, errs[r] = runDevCase(ctx, rs[r], devCase{kind: op, count: fakeBig, dt: dtype.Float32, op: dtype.Sum})
					took[r] = time.Since(start)
				}()
			}
			go func() { runDevCase(ctx, rs[1], devCase{kind: op, count: fakeBig, dt: dtype.Float32, op: dtype.Sum}) }()
			<-dead
			wg.Wait()
			once.Do(func() { close(released) })
			for _, r := range []int{0, 2} {
				err := errs[r]
				switch {
				case err == nil:
					t.Errorf("rank %d: the call succeeded", r)
				case errors.Is(err, context.DeadlineExceeded):
					t.Errorf("rank %d: ran into the deadline: %v", r, err)
				case !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "net (tcp lo)"):
					t.Errorf("rank %d: %v, want rank 1 and the net link named", r, err)
				}
				if took[r] > 5*time.Second {
					t.Errorf("rank %d: failing took %v", r, took[r])
				}
			}
			t.Logf("rank 0 after %v: %v", took[0], errs[0])
		})
	}
}

// TestGPUFakeNetProfile: stage 1 measures every pair's connection at
// setup and puts the net link's profile in the pair's planner in place of
// the nominal speed; timed pushes then feed the net part's timings back
// (stage 2); the profile is saved at Close under a key of its own (three
// links) and the next DeviceComm between the same GPUs starts from it.
func TestGPUFakeNetProfile(t *testing.T) {
	dir := t.TempDir()
	env := netEnv(map[string]string{"FLEXLINK_GPU_NET_SHARE": "0.2", "FLEXLINK_CACHE_DIR": dir})
	rs := fakeRanks(t, 2, gpufake.Config{}, env, 2*fakeBig*8)
	for _, r := range rs {
		tx := r.dc.Plane().(*directPlane).px().Tx(1 - r.c.Rank())
		st := tx.Planner.State()
		if len(st.Links) != 3 || st.Links[2].Spec.Kind != fabric.KindNet || tx.Cached {
			t.Fatalf("rank %d: planner links %+v (cached %v), want nvlink, pcie, net from priors", r.c.Rank(), st.Links, tx.Cached)
		}
		if got, prior := st.Links[2].SecondsPerByte, 1/netshare.PriorBW; got == prior || got <= 0 {
			t.Errorf("rank %d: net profile %g s/B: the setup probe did not replace the prior (%g)", r.c.Rank(), got, prior)
		}
	}
	sweep(t, rs, slicesRepeat(devCase{kind: plane.AllGather, count: fakeBig, dt: dtype.Float32}, 8))
	keys := make([]string, 2)
	states := make([]balance.State, 2)
	for _, r := range rs {
		tx := r.dc.Plane().(*directPlane).px().Tx(1 - r.c.Rank())
		measured := false
		for _, c := range tx.Planner.State().Classes {
			measured = measured || c.Links[linkNet].N > 0
		}
		if tx.Observed < 2 || !measured {
			t.Errorf("rank %d: %d observations, net measured %v", r.c.Rank(), tx.Observed, measured)
		}
		keys[r.c.Rank()] = tx.Key
	}
	ctx := testCtx(t, 20*time.Second)
	closeRanks(t, ctx, rs)
	for r, key := range keys {
		st, err := balance.LoadProfile(dir, key)
		if err != nil || !strings.HasSuffix(key, " +net") || len(st.Links) != 3 {
			t.Fatalf("rank %d's profile %q: %v, %d links", r, key, err, len(st.Links))
		}
		states[r] = st
	}
	rs2 := fakeRanks(t, 2, gpufake.Config{}, env, 1<<16)
	for _, r := range rs2 {
		tx := r.dc.Plane().(*directPlane).px().Tx(1 - r.c.Rank())
		if !tx.Cached || fmt.Sprint(tx.Planner.State()) != fmt.Sprint(states[r.c.Rank()]) {
			t.Errorf("rank %d did not start from its cached profile (the setup probe must not replace it)", r.c.Rank())
		}
	}
}

func slicesRepeat(c devCase, n int) []devCase {
	out := make([]devCase, n)
	for i := range out {
		out[i] = c
	}
	return out
}
