package settings

import (
	"strings"
	"testing"
	"time"
)

// values lists, for every setting, values it must accept and values it
// must refuse. Free text takes anything: its bad list is empty.
var values = map[string]struct{ good, bad []string }{
	"FLEXLINK_DEBUG":                  {[]string{"WARN", "debug", "Trace", "INFO"}, []string{"LOUD", "3", "WARN,INFO"}},
	"FLEXLINK_DEBUG_SUBSYS":           {[]string{"INIT,NET", "coll", "^COLL,P2P", "ALL", " init , coll "}, []string{"COLLS", "INIT;NET", "^BOGUS"}},
	"FLEXLINK_DEBUG_FILE":             {[]string{"/tmp/flexlink.%h.%p", "log.%r"}, nil},
	"FLEXLINK_RANK":                   {[]string{"0", "15"}, []string{"-1", "one", "1.5"}},
	"FLEXLINK_WORLD_SIZE":             {[]string{"1", "4096"}, []string{"0", "-2", "x"}},
	"FLEXLINK_LOCAL_RANK":             {[]string{"0", "7"}, []string{"-1", "a"}},
	"FLEXLINK_LOCAL_SIZE":             {[]string{"1", "8"}, []string{"0", "b"}},
	"FLEXLINK_NODE_RANK":              {[]string{"0", "3"}, []string{"-3", "c"}},
	"FLEXLINK_BOOTSTRAP":              {[]string{"127.0.0.1:29400", "[::1]:1", "node1:65535"}, []string{"127.0.0.1", "h:0", "h:70000", "h:port"}},
	"FLEXLINK_JOB_ID":                 {[]string{"abc", "job 7"}, nil},
	"FLEXLINK_JOB_SECRET":             {[]string{"00ff", "DEADbeef"}, []string{"xyz", "abc"}},
	"FLEXLINK_GPU":                    {[]string{"-1", "0", "7"}, []string{"-2", "gpu0"}},
	"FLEXLINK_BOOTSTRAP_TIMEOUT":      {[]string{"60s", "90", "1m30s", "0", "0.5"}, []string{"-5s", "notaduration", "2x", "-1"}},
	"FLEXLINK_HOSTNAME":               {[]string{"node-1"}, nil},
	"FLEXLINK_SLURM_PORT":             {[]string{"1", "31337", "65535"}, []string{"0", "99999", "http"}},
	"FLEXLINK_KEY_FILE":               {[]string{"/tmp/k"}, nil},
	"FLEXLINK_TIMEOUT":                {[]string{"0", "30s", "500ms"}, []string{"notaduration", "-1s"}},
	"FLEXLINK_TRANSPORT":              {[]string{"auto", "shm", "TCP", "net"}, []string{"rdma", "shm,tcp"}},
	"FLEXLINK_NET":                    {[]string{"auto", "tcp", "ucx"}, []string{"ib", "tcp,ucx"}},
	"FLEXLINK_NET_IFNAME":             {[]string{"eth0", "^docker", "=rail0,rail1"}, nil},
	"FLEXLINK_NET_SOCKETS":            {[]string{"1", "64"}, []string{"0", "65", "two"}},
	"FLEXLINK_NET_STRIPE_BYTES":       {[]string{"1", "64K", "1G"}, []string{"0", "2G", "big"}},
	"FLEXLINK_NET_TIMEOUT":            {[]string{"10s", "500ms"}, []string{"-1s", "soon"}},
	"FLEXLINK_NET_RAILS":              {[]string{"all", "0", "1", "8"}, []string{"-1", "65", "every"}},
	"FLEXLINK_PXN":                    {[]string{"off", "0", "1", "2"}, []string{"3", "on", "-1"}},
	"FLEXLINK_RINGS":                  {[]string{"auto", "1"}, []string{"2", "0", "many"}},
	"FLEXLINK_PXN_GROUP":              {[]string{"0", "1", "true"}, []string{"2", "yes please"}},
	"FLEXLINK_NET_DEVICES":            {[]string{"", "eth0", "eth0,eth1"}, nil},
	"FLEXLINK_SOCKET_IFNAME":          {[]string{"eth0", "^docker"}, nil},
	"FLEXLINK_PORT_RANGE":             {[]string{"50000-50100", "50000", "1-65535", " 29500 - 29600 "}, []string{"50100-50000", "0-10", "50000-70000", "a-b", "50000:50100"}},
	"FLEXLINK_SOCKETS_PER_PEER":       {[]string{"1", "16"}, []string{"0", "17", "two"}},
	"FLEXLINK_SOCKET_TIMEOUT":         {[]string{"10s", "1"}, []string{"-1s", "soon"}},
	"FLEXLINK_SHM_RING_BYTES":         {[]string{"4194304", "64K", "1G", "4MiB"}, []string{"1024", "2G", "lots", "-64K"}},
	"FLEXLINK_SHM_CMA_BYTES":          {[]string{"0", "auto", "65536", "64K"}, []string{"-1", "on", "AUTO2"}},
	"FLEXLINK_ALGO":                   {[]string{"auto", "ring", "rd", "RING", "hier"}, []string{"tree", "ring,rd"}},
	"FLEXLINK_ALGO_THRESHOLD":         {[]string{"0", "65536", "64k"}, []string{"-1", "big"}},
	"FLEXLINK_CHUNK_BYTES":            {[]string{"1048576", "1M", "1"}, []string{"-5", "1X", "0"}},
	"FLEXLINK_LIVENESS_TIMEOUT":       {[]string{"30s", "10", "500ms"}, []string{"0", "0s", "-1s", "x"}},
	"FLEXLINK_LINKS":                  {[]string{"nvlink", "nvlink,pcie", "NVLINK, net", "nvlink,pcie,net", "shm,"}, []string{"bogus", "nvlink,bogus", "nvlink;pcie", "nvlink,pcie,nic"}},
	"FLEXLINK_CACHE_DIR":              {[]string{"/var/cache/x"}, nil},
	"FLEXLINK_TOPO_FILE":              {[]string{"topo.xml"}, nil},
	"FLEXLINK_TOPO_DUMP_FILE":         {[]string{"out.json"}, nil},
	"FLEXLINK_RAILS":                  {[]string{"mlx5_0,mlx5_1"}, nil},
	"FLEXLINK_PXN_GPU_HANDOFF":        {[]string{"0", "1", "true"}, []string{"2", "ipc"}},
	"FLEXLINK_GPU_PATH":               {[]string{"auto", "direct", "staged"}, []string{"fast"}},
	"FLEXLINK_GPU_SHARED":             {[]string{"auto", "leader", "events"}, []string{"mps", "one"}},
	"FLEXLINK_STACK_DUMP_AFTER":       {[]string{"0", "90s"}, []string{"soon", "-1s"}},
	"FLEXLINK_GPU_ENQUEUE":            {[]string{"async", "SYNC"}, []string{"on", "1"}},
	"FLEXLINK_GPU_GRAPH_RECORD":       {[]string{"branch", "Chain", "auto"}, []string{"1", "side"}},
	"FLEXLINK_GPU_CHUNK_BYTES":        {[]string{"65536", "16M"}, []string{"65535", "1K", "x"}},
	"FLEXLINK_GPU_COPY_STREAMS":       {[]string{"1", "16"}, []string{"0", "17"}},
	"FLEXLINK_GPU_ALLREDUCE":          {[]string{"read", "push", "auto"}, []string{"pull", "store"}},
	"FLEXLINK_GPU_ALLGATHER":          {[]string{"store", "push", "pull", "auto"}, []string{"read"}},
	"FLEXLINK_GPU_ALLTOALL":           {[]string{"store", "push", "pull", "auto"}, []string{"read"}},
	"FLEXLINK_GPU_FLAG_BYTES":         {[]string{"-1", "0", "1099511627776", "32M"}, []string{"-2", "all"}},
	"FLEXLINK_GPU_FLAG_COLL_BYTES":    {[]string{"-1", "0", "65536"}, []string{"-2", "auto"}},
	"FLEXLINK_GPU_FLAG_ONESHOT_BYTES": {[]string{"-1", "16", "2M"}, []string{"-3", "x"}},
	"FLEXLINK_GPU_FLAG_LINES":         {[]string{"0", "1", "on"}, []string{"2", "maybe"}},
	"FLEXLINK_GPU_FLAG_BLOCKS":        {[]string{"1", "128", "160"}, []string{"0", "161", "many"}},
	"FLEXLINK_GPU_FLAG_PCIE_BLOCKS":   {[]string{"0", "32"}, []string{"-1", "33"}},
	"FLEXLINK_GPU_FLAG_REGION_BYTES":  {[]string{"134217728", "128M"}, []string{"-1", "huge"}},
	"FLEXLINK_GPU_KERNEL_TIMEOUT":     {[]string{"10m", "0", "300ms"}, []string{"-10m", "forever"}},
	"FLEXLINK_STALL_REPORT":           {[]string{"5s", "0", "1s"}, []string{"-1s", "soon"}},
	"FLEXLINK_GPU_STAGED_CHUNK_BYTES": {[]string{"auto", "0", "4194304", "16M"}, []string{"-1", "2T", "big"}},
	"FLEXLINK_PCIE_STAGING_BYTES":     {[]string{"0", "67108864", "16G"}, []string{"-1", "17G"}},
	"FLEXLINK_PCIE_SHARE":             {[]string{"0", "0.1", "0.5"}, []string{"0.6", "-0.1", "NaN", "half"}},
	"FLEXLINK_NET_TAIL":               {[]string{"0", "0.25", "0.5"}, []string{"-0.1", "0.6", "x"}},
	"FLEXLINK_GPU_NET_SHARE":          {[]string{"0", "0.01", "0.5"}, []string{"0.6", "-0.1", "NaN", "some"}},
	"FLEXLINK_GPU_PTX":                {[]string{"k.ptx"}, nil},
	"FLEXLINK_CPU_PROFILE":            {[]string{"/tmp/p.prof"}, nil},
	"FLEXLINK_CPU_PROFILE_SECONDS":    {[]string{"5"}, []string{"0", "x"}},
	"FLEXLINK_GPU_KERNELS":            {[]string{"gpu/kernels/fatbin"}, nil},
	"FLEXLINK_REQUIRE_GPU":            {[]string{"1", "0", "yes", "OFF", "true"}, []string{"2", "maybe"}},
	"FLEXLINK_REQUIRE_SYSTEM":         {[]string{"on", "false"}, []string{"y"}},
}

// TestEverySettingChecked: each setting's default and good values pass,
// and each bad value fails with the variable, the value and what is
// allowed named, in Validate, in Check and in the typed getters.
func TestEverySettingChecked(t *testing.T) {
	for _, s := range Table {
		t.Run(s.Name, func(t *testing.T) {
			vs, ok := values[s.Name]
			if !ok {
				t.Fatalf("no good and bad values for %s in this test's table", s.Name)
			}
			if s.Kind.Allowed == "" {
				t.Fatalf("%s has no Kind", s.Name)
			}
			if err := checkValue(s, s.Default); err != nil {
				t.Errorf("default: %v", err)
			}
			if len(vs.bad) == 0 && s.Kind.check != nil {
				t.Errorf("%s is checked but this test names no bad value", s.Name)
			}
			for _, v := range vs.good {
				env := Map(map[string]string{s.Name: v})
				if err := Validate(env); err != nil {
					t.Errorf("Validate(%s=%q): %v", s.Name, v, err)
				}
				if err := env.Check(s.Name); err != nil {
					t.Errorf("Check(%s=%q): %v", s.Name, v, err)
				}
			}
			for _, v := range vs.bad {
				env := Map(map[string]string{s.Name: v})
				err := Validate(env)
				if err == nil {
					t.Errorf("Validate accepted %s=%q", s.Name, v)
					continue
				}
				want := s.Name + "=" + quote(v) + ": want " + s.Kind.Allowed
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate(%s=%q) = %q, want it to hold %q", s.Name, v, err, want)
				}
				if err := env.Check(s.Name); err == nil {
					t.Errorf("Check accepted %s=%q", s.Name, v)
				}
				// The getters that can fail refuse it too.
				if _, err := env.Int(s.Name); err == nil && isInt(s) {
					t.Errorf("Int accepted %s=%q", s.Name, v)
				}
				if _, err := env.Duration(s.Name); err == nil && strings.HasPrefix(s.Kind.Allowed, "a duration") {
					t.Errorf("Duration accepted %s=%q", s.Name, v)
				}
			}
		})
	}
	for name := range values {
		if !known(name) {
			t.Errorf("this test's table names %s, which Table does not declare", name)
		}
	}
}

func isInt(s Setting) bool {
	return strings.HasPrefix(s.Kind.Allowed, "an integer") || s.Kind.bytes
}

func quote(v string) string { return `"` + v + `"` }

// TestValidateAll: every bad value of an environment is reported at once;
// unset and empty values are not checked (they mean the default).
func TestValidateAll(t *testing.T) {
	env := Map(map[string]string{"FLEXLINK_TIMEOUT": "notaduration", "FLEXLINK_LINKS": "bogus",
		"FLEXLINK_ALGO": "", "FLEXLINK_RANK": "2", "PATH": "/bin"})
	err := Validate(env)
	if err == nil {
		t.Fatal("bad values accepted")
	}
	for _, want := range []string{`FLEXLINK_TIMEOUT="notaduration": want a duration`, `FLEXLINK_LINKS="bogus": want a comma-separated list of nvlink, pcie`, `("bogus" is none of them)`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "FLEXLINK_ALGO") || strings.Contains(err.Error(), "FLEXLINK_RANK") {
		t.Errorf("good or empty values reported: %q", err)
	}
	if err := Validate(Map(nil)); err != nil {
		t.Errorf("empty environment: %v", err)
	}
}

func TestWarnings(t *testing.T) {
	got := Warnings([]string{"FLEXLINK_TIMOUT=5s", "FLEXLINK_ALGO=ring", "FLEXLINK_TIMOUT=6s", "PATH=/bin", "FLEXLINK_SOCKET_IFACE=eth0", "FLEXLINK_X"})
	want := []string{
		"FLEXLINK_TIMOUT is not a flexlink setting (did you mean FLEXLINK_TIMEOUT?); it is ignored",
		"FLEXLINK_SOCKET_IFACE is not a flexlink setting (did you mean FLEXLINK_SOCKET_IFNAME?); it is ignored",
		"FLEXLINK_X is not a flexlink setting (did you mean FLEXLINK_PXN?); it is ignored",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGetters: the typed getters parse what Validate accepts.
func TestGetters(t *testing.T) {
	env := Map(map[string]string{"FLEXLINK_SHM_RING_BYTES": "4M", "FLEXLINK_CHUNK_BYTES": "64KiB",
		"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_TIMEOUT": "0.25", "FLEXLINK_REQUIRE_GPU": "On"})
	for name, want := range map[string]int{"FLEXLINK_SHM_RING_BYTES": 4 << 20, "FLEXLINK_CHUNK_BYTES": 64 << 10,
		"FLEXLINK_GPU_FLAG_BYTES": -1, "FLEXLINK_SOCKETS_PER_PEER": 2} {
		if n, err := env.Int(name); err != nil || n != want {
			t.Errorf("Int(%s) = %d, %v; want %d", name, n, err, want)
		}
	}
	if d, err := env.Duration("FLEXLINK_TIMEOUT"); err != nil || d != 250*time.Millisecond {
		t.Errorf("Duration = %v, %v", d, err)
	}
	if !env.Bool("FLEXLINK_REQUIRE_GPU") || env.Bool("FLEXLINK_REQUIRE_SYSTEM") {
		t.Error("Bool")
	}
	if _, err := env.Int("FLEXLINK_ALGO"); err == nil {
		t.Error("Int of a word accepted")
	}
}
