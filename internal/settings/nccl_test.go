package settings

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Each NCCL alias, set alone, gives its FLEXLINK setting the value NCCL's
// documentation means; the reference is written out per row, not derived
// from the table.
func TestNCCLAliasSetsItsSetting(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		setting string
		want    string
	}{
		{map[string]string{"NCCL_SOCKET_IFNAME": "^docker,lo"}, "FLEXLINK_SOCKET_IFNAME", "^docker,lo"},
		{map[string]string{"NCCL_IB_HCA": "mlx5_0:1,mlx5_3"}, "FLEXLINK_NET_DEVICES", "mlx5_0:1,mlx5_3:1"},
		{map[string]string{"NCCL_IB_HCA": "=mlx5_1:2"}, "FLEXLINK_NET_DEVICES", "mlx5_1:2"},
		{map[string]string{"NCCL_NET": "Socket"}, "FLEXLINK_NET", "tcp"},
		{map[string]string{"NCCL_NET": "IB"}, "FLEXLINK_NET", "ucx"},
		{map[string]string{"NCCL_IB_DISABLE": "1"}, "FLEXLINK_NET", "tcp"},
		{map[string]string{"NCCL_IB_DISABLE": "0"}, "FLEXLINK_NET", "auto"},
		{map[string]string{"NCCL_P2P_DISABLE": "1"}, "FLEXLINK_GPU_PATH", "staged"},
		{map[string]string{"NCCL_P2P_DISABLE": "0"}, "FLEXLINK_GPU_PATH", "auto"},
		{map[string]string{"NCCL_SHM_DISABLE": "1"}, "FLEXLINK_TRANSPORT", "net"},
		{map[string]string{"NCCL_SHM_DISABLE": "0"}, "FLEXLINK_TRANSPORT", "auto"},
		{map[string]string{"NCCL_PXN_DISABLE": "1"}, "FLEXLINK_PXN", "0"},
		{map[string]string{"NCCL_PXN_DISABLE": "1", "NCCL_P2P_PXN_LEVEL": "2"}, "FLEXLINK_PXN", "0"},
		{map[string]string{"NCCL_PXN_DISABLE": "0", "NCCL_P2P_PXN_LEVEL": "1"}, "FLEXLINK_PXN", "1"},
		{map[string]string{"NCCL_P2P_PXN_LEVEL": "2"}, "FLEXLINK_PXN", "2"},
		{map[string]string{"NCCL_NSOCKS_PERTHREAD": "4"}, "FLEXLINK_NET_SOCKETS", "4"},
		{map[string]string{"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "2"}, "FLEXLINK_NET_SOCKETS", "8"},
		{map[string]string{"NCCL_SOCKET_NTHREADS": "3"}, "FLEXLINK_NET_SOCKETS", "3"},
		{map[string]string{"NCCL_BUFFSIZE": "8388608"}, "FLEXLINK_SHM_RING_BYTES", "8388608"},
		{map[string]string{"NCCL_TOPO_FILE": "/etc/nccl/topo.xml"}, "FLEXLINK_TOPO_FILE", "/etc/nccl/topo.xml"},
	} {
		env := WithNCCL(Map(tc.env))
		if got := env.String(tc.setting); got != tc.want {
			t.Errorf("%v: %s = %q, want %q", tc.env, tc.setting, got, tc.want)
		}
		if err := Validate(env); err != nil {
			t.Errorf("%v: Validate: %v", tc.env, err)
		}
	}
}

// Every alias of the table is covered above or below: a new alias without
// a test fails here.
func TestNCCLAliasTableCovered(t *testing.T) {
	b, err := os.ReadFile("nccl_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range NCCLAliases {
		if !strings.Contains(string(b), `"`+a.NCCL+`"`) {
			t.Errorf("%s has no row in TestNCCLAliasSetsItsSetting or TestNCCLBadValueNamesIt", a.NCCL)
		}
	}
}

// The FLEXLINK name wins over its NCCL alias, and the typed getters see
// the alias's value (Int over NCCL_BUFFSIZE).
func TestNCCLFlexlinkWins(t *testing.T) {
	env := WithNCCL(Map(map[string]string{"NCCL_SOCKET_IFNAME": "eth", "FLEXLINK_SOCKET_IFNAME": "ib", "NCCL_BUFFSIZE": "1048576"}))
	if got := env.String("FLEXLINK_SOCKET_IFNAME"); got != "ib" {
		t.Errorf("FLEXLINK_SOCKET_IFNAME = %q, want the FLEXLINK value ib", got)
	}
	if n, err := env.Int("FLEXLINK_SHM_RING_BYTES"); err != nil || n != 1<<20 {
		t.Errorf("FLEXLINK_SHM_RING_BYTES = %d, %v; want 1048576 from NCCL_BUFFSIZE", n, err)
	}
	if !env.IsSet("FLEXLINK_SHM_RING_BYTES") {
		t.Error("IsSet(FLEXLINK_SHM_RING_BYTES) = false with NCCL_BUFFSIZE set")
	}
	// Without the wrapper (a plain map, as tests build), NCCL is not read.
	if got := Map(map[string]string{"NCCL_SHM_DISABLE": "1"}).String("FLEXLINK_TRANSPORT"); got != "auto" {
		t.Errorf("plain Map: FLEXLINK_TRANSPORT = %q, want the default", got)
	}
}

// A bad value of a mapped NCCL variable is an error naming it (and its
// value) from Validate, whether or not the FLEXLINK name wins; the
// setting itself stays at its default.
func TestNCCLBadValueNamesIt(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		name    string
		setting string
	}{
		{map[string]string{"NCCL_SHM_DISABLE": "yes"}, "NCCL_SHM_DISABLE", "FLEXLINK_TRANSPORT"},
		{map[string]string{"NCCL_P2P_DISABLE": "2"}, "NCCL_P2P_DISABLE", "FLEXLINK_GPU_PATH"},
		{map[string]string{"NCCL_IB_DISABLE": "true"}, "NCCL_IB_DISABLE", "FLEXLINK_NET"},
		{map[string]string{"NCCL_PXN_DISABLE": "on"}, "NCCL_PXN_DISABLE", "FLEXLINK_PXN"},
		{map[string]string{"NCCL_P2P_PXN_LEVEL": "3"}, "NCCL_P2P_PXN_LEVEL", "FLEXLINK_PXN"},
		{map[string]string{"NCCL_IB_HCA": "mlx5_0:x"}, "NCCL_IB_HCA", "FLEXLINK_NET_DEVICES"},
		{map[string]string{"NCCL_NSOCKS_PERTHREAD": "0"}, "NCCL_NSOCKS_PERTHREAD", "FLEXLINK_NET_SOCKETS"},
		{map[string]string{"NCCL_NSOCKS_PERTHREAD": "16", "NCCL_SOCKET_NTHREADS": "8"}, "NCCL_NSOCKS_PERTHREAD", "FLEXLINK_NET_SOCKETS"},
		{map[string]string{"NCCL_SOCKET_NTHREADS": "x"}, "NCCL_SOCKET_NTHREADS", "FLEXLINK_NET_SOCKETS"},
		{map[string]string{"NCCL_BUFFSIZE": "4M"}, "NCCL_BUFFSIZE", "FLEXLINK_SHM_RING_BYTES"},
		{map[string]string{"NCCL_BUFFSIZE": "1024"}, "NCCL_BUFFSIZE", "FLEXLINK_SHM_RING_BYTES"}, // below the ring's 64 KiB
		{map[string]string{"NCCL_SHM_DISABLE": "maybe", "FLEXLINK_TRANSPORT": "shm"}, "NCCL_SHM_DISABLE", ""},
	} {
		env := WithNCCL(Map(tc.env))
		err := Validate(env)
		if err == nil || !strings.Contains(err.Error(), tc.name+"=") || !strings.Contains(err.Error(), tc.env[tc.name]) {
			t.Errorf("%v: Validate = %v, want an error naming %s and its value", tc.env, err, tc.name)
		}
		if tc.setting != "" {
			if got, def := env.String(tc.setting), lookup(tc.setting).Default; got != def {
				t.Errorf("%v: %s = %q, want its default %q", tc.env, tc.setting, got, def)
			}
		}
	}
}

// Unmapped NCCL variables get one line each, saying they do nothing;
// mapped ones, the logger's, and nccl-tests' own get none.
func TestNCCLNotes(t *testing.T) {
	environ := []string{"NCCL_ALGO=Tree", "PATH=/bin", "NCCL_SOCKET_IFNAME=eth0", "NCCL_DEBUG=INFO",
		"NCCL_NET_GDR_LEVEL=PHB", "NCCL_ALGO=Ring", "NCCL_TESTS_DEVICE=0", "NCCL_SOMETHING_NEW=1"}
	got := NCCLNotes(environ)
	want := []string{"NCCL_ALGO has no effect on flexlink", "NCCL_NET_GDR_LEVEL has no effect on flexlink", "NCCL_SOMETHING_NEW has no effect on flexlink"}
	if len(got) != len(want) {
		t.Fatalf("notes %q, want one each for %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("note %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	if !strings.Contains(got[1], "GPUDirect RDMA") {
		t.Errorf("NCCL_NET_GDR_LEVEL's note %q does not say why", got[1])
	}
}

// A well-formed NCCL value that asks for what flexlink does not do (an
// HCA exclusion, a net plugin) leaves the setting alone, is no error (a
// job written for NCCL must not fail on it), and gets its INFO line.
func TestNCCLNoEffectValues(t *testing.T) {
	for _, kv := range []string{"NCCL_IB_HCA=^mlx5_2", "NCCL_NET=AWS Libfabric"} {
		name, value, _ := strings.Cut(kv, "=")
		env := WithNCCL(Map(map[string]string{name: value}))
		if err := Validate(env); err != nil {
			t.Errorf("%s: Validate = %v, want no error", kv, err)
		}
		a := NCCLAliases[slices.IndexFunc(NCCLAliases, func(a Alias) bool { return a.NCCL == name })]
		if got, def := env.String(a.Setting), lookup(a.Setting).Default; got != def {
			t.Errorf("%s: %s = %q, want its default %q", kv, a.Setting, got, def)
		}
		notes := NCCLNotes([]string{kv})
		if len(notes) != 1 || !strings.HasPrefix(notes[0], kv+" has no effect on flexlink (") {
			t.Errorf("%s: notes %q, want one saying it has no effect and why", kv, notes)
		}
	}
}

// docs/SETTINGS.md holds the alias table as the registry renders it.
func TestNCCLTableInDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/SETTINGS.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), NCCLMarkdown()) {
		t.Fatalf("docs/SETTINGS.md lacks the NCCL table; put this before the settings table:\n%s", NCCLMarkdown())
	}
}
