package pxn

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseLevel(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Level
		ok   bool
	}{
		{"0", Off, true}, {"1", FarNIC, true}, {" 2 ", Rail, true},
		{"3", 0, false}, {"-1", 0, false}, {"on", 0, false}, {"", 0, false},
	} {
		got, err := ParseLevel(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestComputeErrors(t *testing.T) {
	cpu := world(t, 2, cpuHost("host0", 2), cpuHost("host1", 2))
	for _, c := range []struct {
		name string
		opt  Options
		want string
	}{
		{"gpu buffers without GPUs", Options{Level: Rail, Mem: GPUMem}, "rank 0 on host host0 has no GPU"},
		{"level", Options{Level: 3, Mem: HostMem}, "level 3"},
		{"mem", Options{Level: Rail, Mem: 7}, "memory kind 7"},
	} {
		if _, err := Compute(cpu, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

// TestDeterministic: every rank computes the plan from its own copy of
// the World; the copies must agree.
func TestDeterministic(t *testing.T) {
	for _, c := range planCases() {
		a, errA := Compute(c.w(t), c.opt)
		b, errB := Compute(c.w(t), c.opt)
		if errA != nil || errB != nil || !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a.Aggregate(0), b.Aggregate(0)) {
			t.Errorf("%s: two computations differ (%v, %v)", c.name, errA, errB)
		}
	}
}

// TestAggregateSplits: more senders than one receive takes are split over
// several receives.
func TestAggregateSplits(t *testing.T) {
	p, err := Compute(dgx(2)(t), Options{Level: Rail})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 3, 8, 16} {
		a := p.Aggregate(limit)
		want := 16 * ((8 + limit - 1) / limit) // 16 destinations, 8 senders each
		if a.Receives != want || a.MaxRecvs != limit {
			t.Errorf("max %d: %d receives, want %d", limit, a.Receives, want)
		}
	}
}

func TestMemText(t *testing.T) {
	for _, m := range []Mem{GPUMem, HostMem} {
		b, _ := m.MarshalText()
		var got Mem
		if err := got.UnmarshalText(b); err != nil || got != m {
			t.Errorf("%v: round trip gives %v, %v", m, got, err)
		}
	}
	var m Mem
	if err := m.UnmarshalText([]byte("nvme")); err == nil {
		t.Error("UnmarshalText accepted nvme")
	}
}
