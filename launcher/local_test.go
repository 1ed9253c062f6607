package launcher

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestCountGPUs(t *testing.T) {
	tests := []struct {
		name    string
		files   []string // created under the fake root
		environ []string
		want    int
	}{
		{"none", nil, nil, 0},
		{"device nodes", []string{"dev/nvidia0", "dev/nvidia1", "dev/nvidia10", "dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-caps/x", "dev/null"}, nil, 3},
		{"proc entries win", []string{"proc/driver/nvidia/gpus/0000:17:00.0/info", "proc/driver/nvidia/gpus/0000:65:00.0/info", "dev/nvidia0"}, nil, 2},
		{"CUDA_VISIBLE_DEVICES counts", []string{"dev/nvidia0", "dev/nvidia1"}, []string{"CUDA_VISIBLE_DEVICES=1"}, 1},
		{"CUDA_VISIBLE_DEVICES uuids", nil, []string{"CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb,GPU-cc"}, 3},
		{"CUDA_VISIBLE_DEVICES empty hides all", []string{"dev/nvidia0"}, []string{"CUDA_VISIBLE_DEVICES="}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := CountGPUs(root, tc.environ); got != tc.want {
				t.Errorf("CountGPUs = %d, want %d", got, tc.want)
			}
		})
	}
}

// fakeMachine is node1.example.com, address 10.0.0.5, with a resolver
// that knows a few names.
func fakeMachine(gpus int) Machine {
	names := map[string][]string{
		"node1.example.com": {"10.0.0.5"},
		"alias.example.com": {"127.0.1.1"},
		"node2.example.com": {"10.0.0.6"},
	}
	return Machine{
		Hostname: "node1.example.com", CPUs: 8, GPUs: gpus,
		Resolve: func(n string) ([]string, error) {
			if a, ok := names[n]; ok {
				return a, nil
			}
			return nil, errors.New("no such host")
		},
		Addrs: func() ([]net.Addr, error) {
			return []net.Addr{&net.IPNet{IP: net.ParseIP("10.0.0.5"), Mask: net.CIDRMask(24, 32)}}, nil
		},
	}
}

func TestIsLocal(t *testing.T) {
	m := fakeMachine(0)
	tests := []struct {
		name string
		want bool
	}{
		{"localhost", true}, {"LOCALHOST", true}, {"127.0.0.1", true}, {"::1", true},
		{"node1.example.com", true}, {"node1", true}, {"node1.example.com.", true},
		{"alias.example.com", true}, // resolves to a loopback address
		{"10.0.0.5", true},          // this machine's address, as a literal
		{"node2.example.com", false}, {"node2", false}, {"10.0.0.6", false}, {"unknown", false},
	}
	for _, tc := range tests {
		if got := m.IsLocal(tc.name); got != tc.want {
			t.Errorf("IsLocal(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHosts(t *testing.T) {
	tests := []struct {
		name  string
		gpus  int
		hosts []Host
		want  []Host
	}{
		{"default: one slot per GPU", 4, nil, []Host{{Name: "node1.example.com", Slots: 4, GPUs: 4, Local: true}}},
		{"default: one slot per core without GPUs", 0, nil, []Host{{Name: "node1.example.com", Slots: 8, Local: true}}},
		{"aliases fold into one host", 2, []Host{{Name: "localhost", Slots: 2}, {Name: "node1", Slots: 3, MaxSlots: 4}},
			[]Host{{Name: "localhost", Slots: 5, GPUs: 2, Local: true}}},
		{"caps add when all capped", 0, []Host{{Name: "localhost", Slots: 1, MaxSlots: 2}, {Name: "127.0.0.1", Slots: 1, MaxSlots: 3}},
			[]Host{{Name: "localhost", Slots: 2, MaxSlots: 5, Local: true}}},
		{"other hosts kept in order", 1, []Host{{Name: "node2.example.com", Slots: 2}, {Name: "localhost", Slots: 1}, {Name: "10.0.0.9", Slots: 3}, {Name: "node1", Slots: 1}},
			[]Host{{Name: "node2.example.com", Slots: 2}, {Name: "localhost", Slots: 2, GPUs: 1, Local: true}, {Name: "10.0.0.9", Slots: 3}}},
		{"only other hosts", 1, []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}},
			[]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fakeMachine(tc.gpus).Hosts(tc.hosts)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
