package pxn

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testenv.Golden(t, filepath.Join("testdata", name), got, *update)
}

// render is the golden form of a plan: one route per line, then the
// aggregation counts and one group per line, all JSON.
func render(t *testing.T, p *Plan) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range p.Routes {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	a := p.Aggregate(0)
	groups := a.Groups
	a.Groups = nil
	if err := enc.Encode(a); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if err := enc.Encode(g); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

type planCase struct {
	name string
	w    func(t *testing.T) *topo.World
	opt  Options
	// check asserts what this case is about, against a reference worked
	// out from the layout by hand.
	check func(t *testing.T, w *topo.World, p *Plan)
}

func TestPlanGolden(t *testing.T) {
	for _, c := range planCases() {
		t.Run(c.name, func(t *testing.T) {
			w := c.w(t)
			p, err := Compute(w, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, w, c.opt, p)
			if c.check != nil {
				c.check(t, w, p)
			}
			checkAggregate(t, p)
			golden(t, c.name+".jsonl", render(t, p))
		})
	}
}

// checkAggregate asserts the aggregation against the routes: every
// message in exactly one group, groups keyed by (via, dst), receives the
// ceiling of senders over 8.
func checkAggregate(t *testing.T, p *Plan) {
	t.Helper()
	a := p.Aggregate(0)
	count, recvs := 0, 0
	in := map[[2]int]int{} // (src, dst) -> times seen
	for _, g := range a.Groups {
		count += len(g.Senders)
		recvs += (len(g.Senders) + 7) / 8
		for _, s := range g.Senders {
			in[[2]int{s, g.Dst}]++
			r, ok := p.Route(s, g.Dst)
			if !ok || r.Via != g.Via || r.NIC != g.NIC || p.Hosts[g.Dst] != g.DstHost {
				t.Errorf("group %+v holds sender %d whose route is %+v", g, s, r)
			}
		}
	}
	if count != len(p.Routes) || a.Messages != len(p.Routes) || a.Receives != recvs || len(in) != len(p.Routes) {
		t.Errorf("aggregation: %d senders in groups, %d messages, %d receives (want %d), %d distinct pairs; %d routes",
			count, a.Messages, a.Receives, recvs, len(in), len(p.Routes))
	}
}

// byIndex is the rank on host hostOf(src) whose GPU has the index of
// dst's GPU: PXN's relay on a host with one NIC per GPU, NIC i on rail i.
func byIndex(w *topo.World, src, dst int) int {
	for v := range w.Size() {
		if w.SameHost(v, src) && w.Member(v).GPU == w.Member(dst).GPU {
			return v
		}
	}
	return -1
}

// wantVia asserts via for a few (src, dst) pairs and that the reason
// mentions a phrase.
type wantVia struct {
	src, dst, via int
	reason        string
}

func checkVias(t *testing.T, p *Plan, want []wantVia) {
	t.Helper()
	for _, w := range want {
		r, ok := p.Route(w.src, w.dst)
		if !ok || r.Via != w.via || !strings.Contains(r.Reason, w.reason) {
			t.Errorf("route %d->%d = %+v; want via %d, reason with %q", w.src, w.dst, r, w.via, w.reason)
		}
	}
}

func dgx(n int) func(t *testing.T) *topo.World {
	return func(t *testing.T) *topo.World { return world(t, 0, copies(loadHost(t, "dgx-h800.json"), n)...) }
}

// checkDGX: on DGX-like hosts at level 2 every message leaves on its
// destination's rail through the GPU with the destination's index, and
// each destination takes one receive per other host.
func checkDGX(t *testing.T, w *topo.World, p *Plan) {
	hosts := w.Size() / 8
	for _, r := range p.Routes {
		if want := byIndex(w, r.Src, r.Dst); r.Via != want || !r.Aligned() {
			t.Errorf("%+v: want via %d, aligned", r, want)
		}
	}
	a := p.Aggregate(0)
	if n := w.Size(); a.Messages != n*(n-8) || a.Receives != n*(hosts-1) || a.CrossRail != 0 || a.Relayed != n*(n-8)*7/8 {
		t.Errorf("aggregation %+v: want %d messages, %d receives, none cross-rail, %d relayed", a, n*(n-8), n*(hosts-1), n*(n-8)*7/8)
	}
}

func noRelays(t *testing.T, w *topo.World, p *Plan) {
	cross := 0
	for _, r := range p.Routes {
		if r.Relayed() {
			t.Errorf("%+v: relayed", r)
		}
		if w.Member(r.Src).GPU != w.Member(r.Dst).GPU {
			cross++
		}
	}
	if a := p.Aggregate(0); a.Receives != a.Messages || a.CrossRail != cross {
		t.Errorf("aggregation %+v: want one receive per message, %d cross-rail", a, cross)
	}
}

func planCases() []planCase {
	return []planCase{
		{name: "dgx-h800x2-l2", w: dgx(2), opt: Options{Level: Rail}, check: checkDGX},
		{name: "dgx-h800x4-l2", w: dgx(4), opt: Options{Level: Rail}, check: checkDGX},
		{name: "dgx-h800x2-l0", w: dgx(2), opt: Options{Level: Off}, check: noRelays},
		// Every H800 has its own NIC behind its PCIe switch: level 1 never relays.
		{name: "dgx-h800x2-l1", w: dgx(2), opt: Options{Level: FarNIC}, check: noRelays},
		{name: "dgx-h800x2-host-l2", w: dgx(2), opt: Options{Level: Rail, Mem: HostMem}, check: checkDGX},
		sharedNICCase(), sharedNICHostCase(),
		missingRailCase(Rail), missingRailCase(FarNIC),
		mixedCountsCase(), idleGPUsCase(), cpuHostsCase(),
	}
}

// sharedNICCase: DGX-1, one NIC per GPU pair (mlx5_k near GPUs 2k, 2k+1,
// rail k) and the hybrid cube-mesh: GPU0 has NVLink to 1, 2, 3, 4 only.
func sharedNICCase() planCase {
	return planCase{
		name: "dgx1x2-l2",
		w:    func(t *testing.T) *topo.World { return world(t, 0, copies(loadHost(t, "dgx1.json"), 2)...) },
		opt:  Options{Level: Rail},
		check: func(t *testing.T, w *topo.World, p *Plan) {
			checkVias(t, p, []wantVia{
				{0, 9, 0, "src is on dst's rail 0"},      // GPU0 and GPU1 share mlx5_0
				{2, 8, 0, "relay over nvlink to GPU 0"},  // rail 0's first destination, first relay
				{2, 9, 1, "relay over nvlink to GPU 1"},  // its second destination, the second relay
				{0, 12, 4, "relay over nvlink to GPU 4"}, // GPU0-GPU4 NVLinked, GPU0-GPU5 not
				{0, 13, 4, "relay over nvlink to GPU 4"}, // so GPU4 takes both
				{0, 14, 0, "no NVLink from GPU 0 to the GPUs on rail 3 (6,7)"},
				{7, 8, 7, "no NVLink from GPU 7 to the GPUs on rail 0 (0,1)"},
				{15, 4, 12, "relay over nvlink to GPU 4"}, // GPU7 reaches both GPUs of rail 2,
				{15, 5, 13, "relay over nvlink to GPU 5"}, // which take a destination each
			})
		},
	}
}

// sharedNICHostCase: the same hosts with host buffers: shm reaches every
// local rank, so every message stays on its rail.
func sharedNICHostCase() planCase {
	c := sharedNICCase()
	c.name, c.opt = "dgx1x2-host-l2", Options{Level: Rail, Mem: HostMem}
	c.check = func(t *testing.T, w *topo.World, p *Plan) {
		for _, r := range p.Routes {
			if !r.Aligned() {
				t.Errorf("%+v: cross-rail with host buffers", r)
			}
		}
		checkVias(t, p, []wantVia{{0, 14, 6, "relay over shm to rank 6"}, {0, 15, 7, "relay over shm to rank 7"}})
	}
	return c
}

// missingRailCase: host1 lost mlx5_3 (rail 3). Its GPU3 then has no NIC
// behind its switch; the nearest left are mlx5_0..2 (NODE), each already
// GPU0..2's own, so it shares the first, mlx5_0: it is on rail 0 and
// relays to the other rails like any GPU. Nothing leaves host1 on rail 3.
func missingRailCase(l Level) planCase {
	return planCase{
		name: fmt.Sprintf("missing-rail-l%d", l),
		w: func(t *testing.T) *topo.World {
			h := copies(loadHost(t, "dgx-h800.json"), 2)
			dropNIC(t, h[1], "mlx5_3")
			return world(t, 0, h...)
		},
		opt: Options{Level: l},
		check: func(t *testing.T, w *topo.World, p *Plan) {
			want := []wantVia{
				{9, 3, 9, "host host1 has no rail 3"}, // to GPU3 of host0, from host1
				{11, 3, 11, "host host1 has no rail 3"},
				{11, 2, 10, "relay over nvlink to GPU 2"}, // mlx5_2 is GPU2's; host1's GPU3 sends from mlx5_0 only
				{11, 4, 12, "relay over nvlink to GPU 4"}, // no NIC near host1's GPU3: relays at level 1 too
				{2, 11, 0, "relay over nvlink to GPU 0"},  // into host1's GPU3, now on rail 0
				{3, 8, 0, "relay over nvlink to GPU 0"},
			}
			if l == FarNIC {
				want[4] = wantVia{2, 11, 2, "level 1: src has its own near NIC mlx5_2"}
				want[5] = wantVia{3, 8, 3, "level 1: src has its own near NIC mlx5_3"}
			}
			checkVias(t, p, want)
		},
	}
}

// mixedCountsCase: an 8-GPU host and a 4-GPU host of the same make (NICs
// mlx5_0..3 only).
func mixedCountsCase() planCase {
	return planCase{
		name: "mixed-8-4-l2",
		w: func(t *testing.T) *topo.World {
			h := copies(loadHost(t, "dgx-h800.json"), 2)
			keepGPUs(h[1], 4)
			return world(t, 0, h...)
		},
		opt: Options{Level: Rail},
		check: func(t *testing.T, w *topo.World, p *Plan) {
			if w.Size() != 12 || len(p.Routes) != 2*8*4 {
				t.Fatalf("%d ranks, %d routes; want 12 and 64", w.Size(), len(p.Routes))
			}
			checkVias(t, p, []wantVia{
				{5, 10, 2, "relay over nvlink to GPU 2"},
				{8, 5, 8, "host host1 has no rail 5"},
				{9, 3, 11, "relay over nvlink to GPU 3"},
			})
		},
	}
}

// cpuHostsCase: the emulated cluster's shape: hosts without GPUs, 4 rails,
// 4 ranks each on host buffers; local rank i owns rail i.
func cpuHostsCase() planCase {
	return planCase{
		name: "cpu-4rails-host-l2",
		w:    func(t *testing.T) *topo.World { return world(t, 4, cpuHost("host0", 4), cpuHost("host1", 4)) },
		opt:  Options{Level: Rail, Mem: HostMem},
		check: func(t *testing.T, w *topo.World, p *Plan) {
			for _, r := range p.Routes {
				via := r.Src/4*4 + r.Dst%4
				if r.Via != via || r.NIC != fmt.Sprintf("eth%d", r.Dst%4) || !r.Aligned() {
					t.Errorf("%+v: want via %d from eth%d", r, via, r.Dst%4)
				}
			}
			if a := p.Aggregate(0); a.Receives != 8 || a.Messages != 32 {
				t.Errorf("aggregation %+v: want 32 messages in 8 receives", a)
			}
		},
	}
}

// idleGPUsCase: host1 has 8 GPUs and 8 NICs but runs ranks on GPUs 0..3
// only: its NICs on rails 4..7 have no rank to drive them.
func idleGPUsCase() planCase {
	return planCase{
		name: "idle-gpus-l2",
		w: func(t *testing.T) *topo.World {
			h := copies(loadHost(t, "dgx-h800.json"), 2)
			var m []topo.Member
			for _, g := range h[0].GPUs {
				m = append(m, topo.Member{Host: h[0], GPU: g.Index})
			}
			for _, g := range h[1].GPUs[:4] {
				m = append(m, topo.Member{Host: h[1], GPU: g.Index})
			}
			w, err := topo.NewWorld(m)
			if err != nil {
				t.Fatal(err)
			}
			return w
		},
		opt: Options{Level: Rail},
		check: func(t *testing.T, w *topo.World, p *Plan) {
			checkVias(t, p, []wantVia{
				{8, 5, 8, "no rank of host host1 is on rail 5"},
				{8, 1, 9, "relay over nvlink to GPU 1"},
				{5, 9, 1, "relay over nvlink to GPU 1"},
			})
		},
	}
}

func TestLevelFromEnv(t *testing.T) {
	for _, c := range []struct {
		val  string
		want Level
		bad  bool
	}{{"", Off, false}, {"off", Off, false}, {"0", Off, false}, {"1", Level(1), false}, {"2", Rail, false}, {"3", 0, true}, {"x", 0, true}} {
		env := settings.Map(map[string]string{"FLEXLINK_PXN": c.val})
		got, on, err := LevelFromEnv(env)
		if on != (c.val != "" && c.val != "off") && !c.bad {
			t.Errorf("%q: on %v", c.val, on)
		}
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "FLEXLINK_PXN") {
				t.Errorf("%q: err %v, want one naming FLEXLINK_PXN", c.val, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %v, %v; want %v", c.val, got, err, c.want)
		}
	}
}
