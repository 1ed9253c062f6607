package balance

import (
	"flag"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current planner")

// The links of DESIGN.md's H200 pair: NVLink copy engines at 391 GB/s
// (nominal 18 × 26.6 GB/s), host-staged PCIe at 34 GB/s (nominal Gen5 x16
// 63 GB/s), plus a 200 Gb/s NIC for three-link cases.
func h200NVLink(id int) simLink {
	return simLink{spec: nominal(id, fabric.KindNVLink, 478.8, 3*time.Microsecond), lat: 5 * time.Microsecond, bw: 391e9}
}
func h200PCIe(id int) simLink {
	return simLink{spec: nominal(id, fabric.KindPCIe, 63, 10*time.Microsecond), lat: 15 * time.Microsecond, bw: 34e9}
}
func nic200G(id int) simLink {
	return simLink{spec: nominal(id, fabric.KindNet, 25, 5*time.Microsecond), lat: 8 * time.Microsecond, bw: 22e9}
}

// scenarios are the simulations every convergence test and golden trace
// runs. Priors are deliberately wrong (nominal figures) unless probes are
// on, so stage 2 has to do the work.
func scenarios() []scenario {
	degraded := h200PCIe(1)
	degraded.slow = []slowdown{{from: 40, to: 80, factor: 4}}
	stalled := h200PCIe(1) // so slow that it drops out, then must win back its share
	stalled.slow = []slowdown{{from: 30, to: 70, factor: 50}}
	hiccup := h200PCIe(1) // one call 50× slow: a lone outlier
	hiccup.slow = []slowdown{{from: 20, to: 21, factor: 50}}
	nvHiccup := h200NVLink(0)
	nvHiccup.slow = []slowdown{{from: 20, to: 21, factor: 50}}
	return []scenario{
		{name: "h200-2link-clean", links: []simLink{h200NVLink(0), h200PCIe(1)}, bytes: 256 << 20, align: 4096, calls: 60, seed: 1},
		{name: "h200-2link-noise10", links: []simLink{h200NVLink(0), h200PCIe(1)}, bytes: 256 << 20, align: 4096, noise: 0.10, calls: 80, seed: 2},
		{name: "h200-2link-probed", links: []simLink{h200NVLink(0), h200PCIe(1)}, bytes: 256 << 20, align: 4096, noise: 0.05, calls: 40, seed: 3, probes: true},
		{name: "3link-noise5", links: []simLink{h200NVLink(0), h200PCIe(1), nic200G(2)}, bytes: 512 << 20, align: 4096, noise: 0.05, calls: 80, seed: 4},
		{name: "unequal-400-1", links: []simLink{
			{spec: nominal(0, fabric.KindNVLink, 400, 3*time.Microsecond), lat: 3 * time.Microsecond, bw: 400e9},
			{spec: nominal(1, fabric.KindTCP, 10, 30*time.Microsecond), lat: 30 * time.Microsecond, bw: 4e9},
		}, bytes: 1 << 30, align: 4096, noise: 0.10, calls: 80, seed: 5},
		{name: "pcie-degrades-recovers", links: []simLink{h200NVLink(0), degraded}, bytes: 256 << 20, align: 4096, noise: 0.05, calls: 120, seed: 6},
		{name: "pcie-stalls-drops-out", links: []simLink{h200NVLink(0), stalled}, bytes: 256 << 20, align: 4096, noise: 0.05, calls: 110, seed: 7},
		{name: "pcie-lone-outlier", links: []simLink{h200NVLink(0), hiccup}, bytes: 256 << 20, align: 4096, noise: 0.05, calls: 40, seed: 8, settleWithin: 3},
		{name: "nvlink-lone-outlier", links: []simLink{nvHiccup, h200PCIe(1)}, bytes: 256 << 20, align: 4096, noise: 0.05, calls: 40, seed: 9, settleWithin: 3},
	}
}

// Bounds every scenario must meet.
const (
	maxConvergeCalls = 30   // calls after a change until the plan stays good
	tolerance        = 0.03 // plan within 3% of the optimum's time, shares within 0.03
	maxFlips         = 4    // sign changes of one link's share deltas once settled
	flipMin          = 2e-3 // deltas smaller than this (probes of a dropped link) are not counted
	steadyCalls      = 20   // the last calls of a phase, where shares must stay in a band
	maxBand          = 0.01 // spread of one link's share over those calls
)

// settle reports, for the phase [from, to) of a trace, the first call from
// which every later call of the phase plans within tolerance (−1 if none),
// and wobble's measures after it.
func settle(tr []step, from, to int) (at, flips int, band float64) {
	at = -1
	for i := to - 1; i >= from; i-- {
		if !good(tr[i]) {
			break
		}
		at = i
	}
	if at < 0 {
		return -1, 0, 0
	}
	flips, band = wobble(tr, at, to)
	return at, flips, band
}

// wobble measures oscillation over calls [from, to): the most sign changes
// of any link's share deltas (ignoring deltas under flipMin), and the
// widest spread of any link's share over the last steadyCalls calls.
func wobble(tr []step, from, to int) (flips int, band float64) {
	for l := range tr[from].shares {
		n, last := 0, 0.0
		for i := from + 1; i < to; i++ {
			if d := tr[i].shares[l] - tr[i-1].shares[l]; math.Abs(d) >= flipMin {
				if last != 0 && (d > 0) != (last > 0) {
					n++
				}
				last = d
			}
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := max(from, to-steadyCalls); i < to; i++ {
			lo, hi = math.Min(lo, tr[i].shares[l]), math.Max(hi, tr[i].shares[l])
		}
		flips, band = max(flips, n), math.Max(band, hi-lo)
	}
	return flips, band
}

func good(st step) bool {
	if st.plan > st.opt*(1+tolerance) {
		return false
	}
	for i := range st.shares {
		if math.Abs(st.shares[i]-st.best[i]) > tolerance {
			return false
		}
	}
	return true
}

// seedsPerScenario: the convergence bounds must hold for every one of
// these noise sequences, not for one lucky seed.
const seedsPerScenario = 100

func TestConvergence(t *testing.T) {
	for _, base := range scenarios() {
		t.Run(base.name, func(t *testing.T) {
			worst := 0
			for n := range seedsPerScenario {
				sc := base
				sc.seed += uint64(n) * 1000
				worst = max(worst, checkConvergence(t, sc))
			}
			t.Logf("slowest settling over %d seeds: %d calls after a change", seedsPerScenario, worst)
		})
	}
}

// checkConvergence runs one scenario, checks every phase against the
// bounds, and returns the most calls any phase took to settle.
func checkConvergence(t *testing.T, sc scenario) int {
	t.Helper()
	p, err := NewPlanner(sc.specs(), sc.probesFor(), sc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := sc.run(p)
	ph := append(sc.phases(), sc.calls)
	worst := 0
	for j := 0; j+1 < len(ph); j++ {
		from, to := ph[j], ph[j+1]
		if to-from < 2 {
			continue // a one-call hiccup: nothing can settle in it
		}
		at, flips, band := settle(tr, from, to)
		if at < 0 || at-from > maxConvergeCalls {
			t.Errorf("seed %d phase [%d,%d): plan not within %.0f%% of the optimum for good by call %d (settled at %d); final shares %.4f, best %.4f",
				sc.seed, from, to, tolerance*100, from+maxConvergeCalls, at, tr[to-1].shares, tr[to-1].best)
			continue
		}
		if limit := sc.settleWithin; limit > 0 && from > 0 && at-from > limit {
			t.Errorf("seed %d phase [%d,%d): settled %d calls after the change, want <= %d", sc.seed, from, to, at-from, limit)
		}
		worst = max(worst, at-from)
		if flips > maxFlips || band > maxBand {
			t.Errorf("seed %d phase [%d,%d): after settling at call %d shares flip direction %d times (max %d); spread %.4f over the last %d calls (max %.2f): oscillation",
				sc.seed, from, to, at, flips, maxFlips, band, steadyCalls, maxBand)
		}
	}
	return worst
}

// TestOscillationIsDetected is the negative control of the bounds above: a
// planner without damping, hysteresis or change detection (every
// measurement taken at face value, shares jumping straight to the target)
// chases the noise, and settle must see it.
func TestOscillationIsDetected(t *testing.T) {
	sc := scenarios()[1] // two links, ±10% noise
	undamped := Config{Alpha: 1, Step: 1, Deadband: 1e-12, JumpRatio: 1e9}
	p, err := NewPlanner(sc.specs(), nil, undamped)
	if err != nil {
		t.Fatal(err)
	}
	tr := sc.run(p)
	flips, band := wobble(tr, maxConvergeCalls, sc.calls)
	if flips <= maxFlips && band <= maxBand {
		t.Fatalf("undamped planner: %d flips, band %.4f; the oscillation bounds (%d, %.2f) do not catch it", flips, band, maxFlips, maxBand)
	}
	t.Logf("undamped planner: %d flips, band %.4f", flips, band)
}

// TestGoldenTraces pins each scenario's whole trace. Run with -update after
// an intended change to the planner and review the diff.
func TestGoldenTraces(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			p, err := NewPlanner(sc.specs(), sc.probesFor(), sc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := sc.golden(sc.run(p))
			testenv.Golden(t, filepath.Join("testdata", sc.name+".golden"), []byte(got), *update)
		})
	}
}
