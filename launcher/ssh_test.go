package launcher

import (
	"reflect"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

func TestSplitArgs(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"-F cfg  -p 2222", []string{"-F", "cfg", "-p", "2222"}, ""},
		{`-o 'ProxyCommand=ssh -W %h:%p jump'`, []string{"-o", "ProxyCommand=ssh -W %h:%p jump"}, ""},
		{`-o "User=a b" x\ y`, []string{"-o", "User=a b", "x y"}, ""},
		{`"a\"b\\c"`, []string{`a"b\c`}, ""},
		{`''`, []string{""}, ""},
		{`-o 'x`, nil, "unclosed single quote"},
		{`"x`, nil, "unclosed double quote"},
		{`x\`, nil, "trailing backslash"},
	}
	for _, tc := range tests {
		got, err := SplitArgs(tc.in)
		if tc.wantErr != "" {
			testenv.WantErr(t, err, tc.wantErr)
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitArgs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/opt/flexlink/bin/flexrun": "/opt/flexlink/bin/flexrun",
		"/my dir/flexrun":           "'/my dir/flexrun'",
		"it's":                      `'it'\''s'`,
		"":                          "''",
		"$HOME/x":                   "'$HOME/x'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSSHCommand(t *testing.T) {
	tests := []struct {
		name string
		r    Remote
		want []string
	}{
		{"defaults", Remote{}, []string{"ssh", "-T", "-x", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", "node7", "flexrun agent --node 3"}},
		{"options", Remote{SSHArgs: []string{"-F", "cfg"}, ConnectTimeout: 1500 * time.Millisecond},
			[]string{"ssh", "-T", "-x", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "-F", "cfg", "--", "node7", "flexrun agent --node 3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.withDefaults().sshCommand("node7", 3); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestSrunCommand(t *testing.T) {
	r := Remote{Executable: "/shared/bin/flexrun", SrunArgs: []string{"--mpi=none"}}.withDefaults()
	want := []string{"srun", "--ntasks-per-node=1", "--nodes=2", "--ntasks=2", "--nodelist=n1,n2", "--kill-on-bad-exit=1",
		"--cpu-bind=none", "--label", "--input=all", "--job-name=flexrun-agents", "--mpi=none", "/shared/bin/flexrun", "agent", "--node", "-1"}
	if got := r.srunCommand([]string{"n1", "n2"}, r.Executable); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestRemoteEnv(t *testing.T) {
	tests := []struct {
		name             string
		environ, exports []string
		want             []string
	}{
		{name: "FLEXLINK_ settings and -x exports",
			environ: []string{"PATH=/head/bin", "FLEXLINK_DEBUG=INFO", "FLEXLINK_HOSTNAME=head", "FLEXLINK_RANK=9", "HOME=/root", "WANDB_KEY=k"},
			exports: []string{"WANDB_KEY", "LR=0.1,0.2", "ABSENT"},
			want:    []string{"FLEXLINK_DEBUG=INFO", "WANDB_KEY=k", "LR=0.1,0.2"}},
		{name: "NCCL_ settings as FLEXLINK_ ones",
			environ: []string{"NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME=^docker,lo", "NCCL_IB_HCA=mlx5_0:1", "PATH=/head/bin", "NCCL_ALGO=Ring"},
			want:    []string{"NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME=^docker,lo", "NCCL_IB_HCA=mlx5_0:1", "NCCL_ALGO=Ring"}},
		{name: "not a host's own name",
			environ: []string{"NCCL_HOSTID=head-7", "FLEXLINK_HOSTNAME=head", "NCCL_P2P_DISABLE=1"},
			want:    []string{"NCCL_P2P_DISABLE=1"}},
		{name: "names that only look alike",
			environ: []string{"MY_NCCL_X=1", "NCCL=1", "nccl_debug=info", "XFLEXLINK_Y=2"}},
		{name: "-x wins over flexrun's own value",
			environ: []string{"NCCL_BUFFSIZE=4194304"},
			exports: []string{"NCCL_BUFFSIZE=8388608"},
			want:    []string{"NCCL_BUFFSIZE=8388608"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := Job{RankEnv: RankEnv{Environ: tc.environ, Exports: tc.exports}}
			if got := job.remoteEnv(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSlurmAllocation(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		want    []Host
		ok      bool
		wantErr string
	}{
		{"outside", []string{"PATH=/bin"}, nil, false, ""},
		{"batch script", []string{"SLURM_JOB_NODELIST=gpu[01-02]", "SLURM_TASKS_PER_NODE=8(x2)"},
			[]Host{{Name: "gpu01", Slots: 8}, {Name: "gpu02", Slots: 8}}, true, ""},
		{"malformed", []string{"SLURM_JOB_NODELIST=gpu[01-02", "SLURM_TASKS_PER_NODE=8(x2)"}, nil, true, "slurm allocation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := slurmAllocation(tc.environ)
			testenv.WantErr(t, err, tc.wantErr)
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestJobHosts(t *testing.T) {
	m := fakeMachine(0)
	alloc := []string{"SLURM_JOB_NODELIST=node1,node[7-8]", "SLURM_TASKS_PER_NODE=2(x3)"}
	tests := []struct {
		name     string
		environ  []string
		hosts    []Host
		launcher string
		want     []Host
		srun     bool
	}{
		{"allocation: every node by srun", alloc, nil, "",
			[]Host{{Name: "node1", Slots: 2}, {Name: "node7", Slots: 2}, {Name: "node8", Slots: 2}}, true},
		{"allocation over ssh: this node local", alloc, nil, "ssh",
			[]Host{{Name: "node1", Slots: 2, Local: true}, {Name: "node7", Slots: 2}, {Name: "node8", Slots: 2}}, false},
		{"-H wins over the allocation", alloc, []Host{{Name: "node9", Slots: 1}}, "", []Host{{Name: "node9", Slots: 1}}, false},
		{"-H by srun", nil, []Host{{Name: "node9", Slots: 1}}, "srun", []Host{{Name: "node9", Slots: 1}}, true},
		{"no allocation, no -H: this host", nil, nil, "", []Host{{Name: "node1.example.com", Slots: 8, Local: true}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := Job{RankEnv: RankEnv{Environ: tc.environ}, Layout: Layout{Hosts: tc.hosts}, Machine: &m, Remote: Remote{Launcher: tc.launcher}}
			got, err := job.hosts()
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("hosts = %+v, %v; want %+v", got, err, tc.want)
			}
			if job.srunMode() != tc.srun {
				t.Errorf("srunMode = %v, want %v", job.srunMode(), tc.srun)
			}
		})
	}
}
