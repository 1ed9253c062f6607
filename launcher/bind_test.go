package launcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

func TestBind(t *testing.T) {
	eight := []int{0, 1, 2, 3, 4, 5, 6, 7}
	twoNodes := CPUTopology{CPUs: eight, NUMA: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}, NUMAIDs: []int{0, 1}, GPUNUMA: []int{1, 0}}
	onHost := func(local, size, gpu int) Placement {
		return Placement{Rank: 10 + local, Host: "h", LocalRank: local, LocalSize: size, GPU: gpu}
	}
	tests := []struct {
		name    string
		mode    BindTo
		t       CPUTopology
		p       Placement
		want    []int
		numa    int
		wantErr string
	}{
		{"none", BindNone, twoNodes, onHost(0, 2, -1), nil, -1, ""},
		{"core: first half", BindCore, twoNodes, onHost(0, 2, -1), []int{0, 1, 2, 3}, -1, ""},
		{"core: second half", BindCore, twoNodes, onHost(1, 2, -1), []int{4, 5, 6, 7}, -1, ""},
		{"core: uneven split", BindCore, CPUTopology{CPUs: []int{0, 1, 2}}, onHost(1, 2, -1), []int{1, 2}, -1, ""},
		{"core: more ranks than cpus", BindCore, CPUTopology{CPUs: []int{4, 5}}, onHost(2, 3, -1), []int{4}, -1, ""},
		{"core: no cpu", BindCore, CPUTopology{}, onHost(0, 1, -1), nil, -1, "no usable CPU"},
		{"numa: GPU's node", BindNUMA, twoNodes, onHost(0, 2, 0), []int{4, 5, 6, 7}, 1, ""},
		{"numa: other GPU's node", BindNUMA, twoNodes, onHost(1, 2, 1), []int{0, 1, 2, 3}, 0, ""},
		{"numa: round-robin without GPU", BindNUMA, twoNodes, onHost(3, 4, -1), []int{4, 5, 6, 7}, 1, ""},
		{"numa: only allowed cpus", BindNUMA, CPUTopology{CPUs: []int{0, 5}, NUMA: twoNodes.NUMA, NUMAIDs: []int{0, 1}}, onHost(1, 2, -1), []int{5}, 1, ""},
		{"numa: node ids kept", BindNUMA, CPUTopology{CPUs: eight, NUMA: [][]int{nil, {2, 3}}, NUMAIDs: []int{0, 3}}, onHost(0, 1, -1), []int{2, 3}, 3, ""},
		{"numa: no nodes", BindNUMA, CPUTopology{CPUs: eight, Source: "x.json"}, onHost(0, 1, -1), nil, -1, "no NUMA node with CPUs found (x.json)"},
		{"gpu: GPU's node", BindGPU, twoNodes, onHost(0, 2, 0), []int{4, 5, 6, 7}, 1, ""},
		{"gpu: other GPU's node", BindGPU, twoNodes, onHost(1, 2, 1), []int{0, 1, 2, 3}, 0, ""},
		{"gpu: no GPU, unbound", BindGPU, twoNodes, onHost(0, 2, -1), nil, -1, ""},
		{"gpu: node unknown, unbound", BindGPU, CPUTopology{CPUs: eight, NUMA: twoNodes.NUMA, NUMAIDs: []int{0, 1}, GPUNUMA: []int{-1}}, onHost(0, 1, 0), nil, -1, ""},
		{"gpu: no topology, unbound", BindGPU, CPUTopology{CPUs: eight}, onHost(0, 1, 0), nil, -1, ""},
		{"auto: as gpu", BindAuto, twoNodes, onHost(0, 2, 1), []int{0, 1, 2, 3}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Bind(tc.mode, tc.t, tc.p)
			testenv.WantErr(t, err, tc.wantErr)
			if tc.wantErr != "" {
				return
			}
			if !reflect.DeepEqual(got.CPUs, tc.want) || got.NUMA != tc.numa {
				t.Errorf("got %v numa %d, want %v numa %d", got.CPUs, got.NUMA, tc.want, tc.numa)
			}
		})
	}
}

func TestBindCoreSharesAreDisjointAndCover(t *testing.T) {
	cpus := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for size := 1; size <= len(cpus); size++ {
		seen := map[int]int{}
		for local := range size {
			b, err := Bind(BindCore, CPUTopology{CPUs: cpus}, Placement{LocalRank: local, LocalSize: size})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(b.CPUs); n < len(cpus)/size || n > len(cpus)/size+1 {
				t.Errorf("size %d local %d: %d cpus", size, local, n)
			}
			for _, c := range b.CPUs {
				seen[c]++
			}
		}
		for _, c := range cpus {
			if seen[c] != 1 {
				t.Errorf("size %d: cpu %d given %d times", size, c, seen[c])
			}
		}
	}
}

func TestParseBindTo(t *testing.T) {
	for in, want := range map[string]BindTo{"": BindNone, "none": BindNone, "CORE": BindCore, "numa": BindNUMA, "gpu": BindGPU, "auto": BindAuto} {
		if got, err := ParseBindTo(in); err != nil || got != want {
			t.Errorf("ParseBindTo(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseBindTo("socket"); err == nil || !strings.Contains(err.Error(), "want auto, none, core, numa or gpu") {
		t.Errorf("socket: %v", err)
	}
}

func TestCPUList(t *testing.T) {
	tests := []struct {
		in, canon string
		want      []int
	}{
		{"0", "0", []int{0}},
		{"0-3,8,10-11", "0-3,8,10-11", []int{0, 1, 2, 3, 8, 10, 11}},
		{"5,1-2,2", "1-2,5", []int{1, 2, 5}},
		{"", "", nil},
	}
	for _, tc := range tests {
		got, err := ParseCPUList(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v", tc.in, got, err)
		}
		if s := FormatCPUList(got); s != tc.canon {
			t.Errorf("FormatCPUList(%v) = %q, want %q", got, s, tc.canon)
		}
	}
	for _, bad := range []string{"a", "3-1", "1-x", "-1"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q): no error", bad)
		}
	}
}

// writeTwoNUMATopo writes a topology file with two NUMA nodes (node 0:
// cpu 0, node 1: cpu 1) and two GPUs, GPU 0 on node 1 and GPU 1 on node 0.
func writeTwoNUMATopo(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "topo.json")
	js := `{"hostname": "h", "numa": [{"id": 0, "cpus": "0"}, {"id": 1, "cpus": "1"}],
	"gpus": [{"index": 0, "bus_id": "0000:01:00.0", "numa_node": 1}, {"index": 1, "bus_id": "0000:02:00.0", "numa_node": 0}], "nics": []}`
	if err := os.WriteFile(f, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLoadCPUTopologyFromFile(t *testing.T) {
	f := writeTwoNUMATopo(t)
	got, err := LoadCPUTopology(BindNUMA, settings.Map(map[string]string{"FLEXLINK_TOPO_FILE": f}), "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.NUMA, [][]int{{0}, {1}}) || !reflect.DeepEqual(got.NUMAIDs, []int{0, 1}) || !reflect.DeepEqual(got.GPUNUMA, []int{1, 0}) {
		t.Errorf("got %+v", got)
	}
	if len(got.CPUs) == 0 {
		t.Errorf("no cpus in this process's affinity")
	}
}

// TestBindingTopologyFile: binding reads the topology file the ranks
// read: FLEXLINK_TOPO_FILE, else NCCL_TOPO_FILE (a job written for NCCL),
// the FLEXLINK name winning when both are set; so does counting the NUMA
// nodes for --map-by ppr:N:numa. The two files differ (two NUMA nodes,
// GPU 0 on node 1; three nodes, GPU 0 on node 2), so the one read shows.
func TestBindingTopologyFile(t *testing.T) {
	two := writeTwoNUMATopo(t)
	three := filepath.Join(t.TempDir(), "three.json")
	must(t, os.WriteFile(three, []byte(`{"hostname":"h","numa":[{"id":0,"cpus":"0"},{"id":1,"cpus":"1"},{"id":2,"cpus":"2"}],
	"gpus":[{"index":0,"bus_id":"0000:01:00.0","numa_node":2}],"nics":[]}`), 0o644))
	sysRoot := fakeSys(t, map[int]string{0: "0-7"}, []int{0, 0, 0, 0, 0, 0, 0, 0}) // one node, when no file is read
	tests := []struct {
		name     string
		env      map[string]string
		source   string
		numa     int // nodes read
		gpu0Node int // GPU 0's node, where --bind-to gpu puts rank 0
	}{
		{"FLEXLINK_TOPO_FILE", map[string]string{"FLEXLINK_TOPO_FILE": two}, two, 2, 1},
		{"NCCL_TOPO_FILE", map[string]string{"NCCL_TOPO_FILE": three}, three, 3, 2},
		{"both: FLEXLINK's wins", map[string]string{"FLEXLINK_TOPO_FILE": two, "NCCL_TOPO_FILE": three}, two, 2, 1},
		{"FLEXLINK's empty: NCCL's", map[string]string{"FLEXLINK_TOPO_FILE": "", "NCCL_TOPO_FILE": three}, three, 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := settings.Map(tc.env)
			got, err := LoadCPUTopology(BindGPU, env, sysRoot)
			if err != nil {
				t.Fatal(err)
			}
			if got.Source != tc.source || len(got.NUMA) != tc.numa {
				t.Errorf("read %d NUMA nodes from %s, want %d from %s", len(got.NUMA), got.Source, tc.numa, tc.source)
			}
			if b := bindGPU(got, Placement{GPU: 0}); b.NUMA != tc.gpu0Node {
				t.Errorf("GPU 0's rank bound to NUMA node %d, want %d", b.NUMA, tc.gpu0Node)
			}
			if numa, _ := CountDomains(env, sysRoot); numa != tc.numa {
				t.Errorf("CountDomains: %d NUMA nodes, want %d", numa, tc.numa)
			}
		})
	}
}

// allowedCPUs runs cat /proc/self/status through the spawner with cpus
// and returns the child's Cpus_allowed_list.
func allowedCPUs(t *testing.T, sp *spawner, cpus []int) []int {
	t.Helper()
	cmd := exec.Command("cat", "/proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	if err := sp.start(cmd, cpus); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			got, err := ParseCPUList(v)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
	}
	t.Fatalf("no Cpus_allowed_list in %q", out.String())
	return nil
}

func TestSpawnerBindsChildOnly(t *testing.T) {
	mine, err := LoadCPUTopology(BindCore, settings.Map(nil), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(mine.CPUs) < 2 {
		testenv.MissingHardware(t, "2 CPUs", "core binding needs two CPUs to tell ranks apart")
	}
	sp := newSpawner()
	defer sp.stop()
	for local := range 2 {
		b, err := Bind(BindCore, mine, Placement{LocalRank: local, LocalSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got := allowedCPUs(t, sp, b.CPUs); !reflect.DeepEqual(got, b.CPUs) {
			t.Errorf("local rank %d: Cpus_allowed_list %v, want %v", local, got, b.CPUs)
		}
	}
	// The spawner's thread got its mask back: an unbound child sees all.
	if got := allowedCPUs(t, sp, nil); !reflect.DeepEqual(got, mine.CPUs) {
		t.Errorf("unbound child: Cpus_allowed_list %v, want %v", got, mine.CPUs)
	}
}

func TestBindingLine(t *testing.T) {
	p := Placement{Rank: 3, Host: "n1", LocalRank: 1}
	if got, want := BindingLine(p, Binding{CPUs: []int{4, 5, 6, 7}, NUMA: 1}), "flexrun: [n1] rank 3 (local 1) bound to cpus 4-7 (numa node 1)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := BindingLine(p, Binding{NUMA: -1}), "flexrun: [n1] rank 3 (local 1) not bound"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
