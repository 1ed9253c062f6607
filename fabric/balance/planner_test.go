package balance

import (
	"math"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
)

// exact returns links whose nominal figures are the truth, so that the
// profile is exact and decisions can be checked against the simulator's
// independent optimum.
func exact(links ...simLink) []simLink {
	for i := range links {
		links[i].spec.Bandwidth, links[i].spec.Latency = links[i].bw, links[i].lat
	}
	return links
}

// TestThreshold checks the size under which one link is used against the
// crossover found independently: the smallest size at which the
// simulator's brute-force optimum uses two links.
func TestThreshold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		links    []simLink
		overhead time.Duration
	}{
		{"h200", exact(h200NVLink(0), h200PCIe(1)), 10 * time.Microsecond},
		{"h200-cheap-split", exact(h200NVLink(0), h200PCIe(1)), time.Microsecond},
		{"3link", exact(h200NVLink(0), h200PCIe(1), nic200G(2)), 10 * time.Microsecond},
		{"equal", exact(nic200G(0), nic200G(1)), 5 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := scenario{links: tc.links}
			p, err := NewPlanner(sc.specs(), nil, Config{SplitOverhead: tc.overhead})
			if err != nil {
				t.Fatal(err)
			}
			splits := func(b int) bool {
				sc.bytes = b
				_, best := sc.optimum(0, tc.overhead.Seconds())
				n := 0
				for _, s := range best {
					if s > 1e-9 {
						n++
					}
				}
				return n > 1
			}
			lo, hi := 1, 1<<34
			for hi-lo > 1 {
				if mid := (lo + hi) / 2; splits(mid) {
					hi = mid
				} else {
					lo = mid
				}
			}
			got := p.Threshold()
			if math.Abs(float64(got-hi)) > 0.001*float64(hi)+1 {
				t.Fatalf("threshold %d bytes, independent crossover %d", got, hi)
			}
			t.Logf("threshold %d bytes (independent %d)", got, hi)
			// Below it one link: the one that moves that size soonest.
			for _, b := range []int{0, 1, 4096, got / 2, got - 1} {
				sh := p.Shares(b)
				if len(sh) != 1 || sh[0].Fraction != 1 {
					t.Fatalf("%d bytes (below threshold %d): shares %v, want one link", b, got, sh)
				}
				fastest, ft := -1, math.Inf(1)
				for i, l := range tc.links {
					if d := l.lat.Seconds() + float64(b)/l.bw; d < ft {
						fastest, ft = i, d
					}
				}
				if sh[0].Link != fastest {
					t.Fatalf("%d bytes: link %d, but link %d is fastest for that size", b, sh[0].Link, fastest)
				}
			}
		})
	}
}

func TestExcludeAdmit(t *testing.T) {
	sc := scenarios()[3] // three links
	p, err := NewPlanner(sc.specs(), nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, want map[int]bool) {
		t.Helper()
		for b := 1 << 16; b <= 1<<32; b <<= 2 {
			sum := 0.0
			for _, s := range p.Shares(b) {
				if !want[s.Link] {
					t.Fatalf("%s: %d bytes: share %v on link %d", what, b, s, s.Link)
				}
				sum += s.Fraction
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("%s: %d bytes: shares sum to %g", what, b, sum)
			}
		}
	}
	sc.calls = 10
	sc.run(p)
	p.Exclude(0)
	if !p.Excluded(0) {
		t.Fatal("Excluded(0) false after Exclude(0)")
	}
	check("nvlink excluded", map[int]bool{1: true, 2: true})
	if got := p.Shares(sc.bytes); len(got) != 2 {
		t.Fatalf("large message without nvlink: shares %v, want pcie and net", got)
	}
	p.Observe(sc.bytes, []Observation{{Link: 0, Bytes: 1 << 20, Duration: time.Microsecond}}) // ignored
	check("nvlink excluded, after a stray observation", map[int]bool{1: true, 2: true})
	p.Exclude(1)
	p.Exclude(2)
	if s, parts := p.Shares(sc.bytes), p.Split(sc.bytes, 4096); s != nil || parts != nil {
		t.Fatalf("all excluded: shares %v parts %v, want nil", s, parts)
	}
	p.Admit(0)
	p.Admit(2)
	check("nvlink and net back", map[int]bool{0: true, 2: true})
	if got := p.Shares(sc.bytes); len(got) != 2 || got[0].Fraction < 0.8 {
		t.Fatalf("after Admit: shares %v, want nvlink carrying most with net", got)
	}
}

func TestFitModel(t *testing.T) {
	prior := model{lat: 10e-6, cost: 1 / 50e9}
	truth := model{lat: 4e-6, cost: 1 / 30e9}
	probe := func(b int) Probe {
		return Probe{Bytes: int64(b), Duration: time.Duration(truth.time(float64(b)) * 1e9)}
	}
	for _, tc := range []struct {
		name   string
		probes []Probe
		want   model
	}{
		{"none", nil, prior},
		{"two sizes", []Probe{probe(1 << 20), probe(16 << 20), probe(1 << 20)}, truth},
		{"one size keeps the prior latency", []Probe{probe(8 << 20)}, model{lat: prior.lat, cost: (truth.time(8<<20) - prior.lat) / (8 << 20)}},
		{"zero durations ignored", []Probe{{Bytes: 1 << 20}}, prior},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fitModel(prior, tc.probes)
			if math.Abs(got.lat-tc.want.lat) > 2e-9 || math.Abs(got.cost/tc.want.cost-1) > 1e-3 {
				t.Fatalf("fit %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConfigAndSpecsValidated(t *testing.T) {
	good := []LinkSpec{nominal(0, fabric.KindNVLink, 400, time.Microsecond)}
	for _, tc := range []struct {
		name  string
		links []LinkSpec
		cfg   Config
	}{
		{"no links", nil, Config{}},
		{"too many links", make([]LinkSpec, MaxLinks+1), Config{}},
		{"duplicate id", append(good, good[0]), Config{}},
		{"zero bandwidth", []LinkSpec{{ID: 1, Kind: fabric.KindPCIe}}, Config{}},
		{"classes not powers of two", good, Config{MinClassBytes: 3000}},
		{"step above one", good, Config{Step: 1.5}},
		{"negative overhead", good, Config{SplitOverhead: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewPlanner(tc.links, nil, tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := NewPlanner(good, nil, Config{}); err != nil {
		t.Fatalf("one good link: %v", err)
	}
}

func TestClassOf(t *testing.T) {
	c := DefaultConfig()
	for _, tc := range []struct{ bytes, class int }{
		{0, 0}, {64 << 10, 0}, {64<<10 + 1, 1}, {128 << 10, 1}, {128<<10 + 1, 2},
		{1 << 20, 4}, {4 << 30, 16}, {64 << 30, 16},
	} {
		if got := c.classOf(tc.bytes); got != tc.class {
			t.Errorf("classOf(%d) = %d, want %d", tc.bytes, got, tc.class)
		}
	}
	if n := c.numClasses(); n != 17 {
		t.Errorf("numClasses = %d, want 17 (64 KiB … 4 GiB)", n)
	}
}
