package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// probeReport is one line of "envprobe env".
type probeReport struct {
	Rank int               `json:"rank"`
	PID  int               `json:"pid"`
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
}

// reports parses the JSON lines of envprobe env, indexed by rank.
func reports(t *testing.T, r result, n int) []probeReport {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("flexrun exited %d; stderr:\n%s", r.code, r.stderr)
	}
	out := make([]probeReport, n)
	seen := make([]bool, n)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d output lines, want %d:\n%s", len(lines), n, r.stdout)
	}
	for _, line := range lines {
		var p probeReport
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if p.Rank < 0 || p.Rank >= n || seen[p.Rank] {
			t.Fatalf("rank %d reported twice or out of range [0,%d)", p.Rank, n)
		}
		seen[p.Rank], out[p.Rank] = true, p
	}
	return out
}

func TestArgumentsAfterProgramPassThrough(t *testing.T) {
	tests := []struct {
		name string
		args []string // after "envprobe env"
	}{
		{"flag-like", []string{"--lr", "0.1"}},
		{"flexrun's own flags", []string{"-np", "7", "--timeout", "1s", "-x", "A=1"}},
		{"help and version", []string{"--help", "-h", "--version", "help"}},
		{"double dash", []string{"--", "x"}},
		{"none", []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-np", "1", bins.probe, "env"}, tc.args...)
			p := reports(t, flexrun(t, runOpts{}, args...), 1)[0]
			if !slices.Equal(p.Args, tc.args) {
				t.Errorf("rank got args %q, want %q", p.Args, tc.args)
			}
		})
	}
}

func TestProgramNamedHelpRuns(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"help ran as rank $FLEXLINK_RANK with $*\"\n"
	if err := os.WriteFile(filepath.Join(dir, "help"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := flexrun(t, runOpts{env: []string{"PATH=" + dir + ":" + os.Getenv("PATH")}}, "-np", "1", "help", "me")
	if r.code != 0 || r.stdout != "help ran as rank 0 with me\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestExportFlag(t *testing.T) {
	tests := []struct {
		name string
		x    []string
		env  []string          // flexrun's extra environment
		want map[string]string // in every rank's environment
	}{
		{"commas kept", []string{"LIST=a,b,c"}, nil, map[string]string{"LIST": "a,b,c"}},
		{"equals in value", []string{"OPT=k=v,k2=v2"}, nil, map[string]string{"OPT": "k=v,k2=v2"}},
		{"last wins", []string{"V=1", "V=2"}, nil, map[string]string{"V": "2"}},
		{"overrides inherited", []string{"FLEXPROBE_A=new"}, []string{"FLEXPROBE_A=old"}, map[string]string{"FLEXPROBE_A": "new"}},
		{"bare name exports flexrun's value", []string{"FLEXPROBE_B"}, []string{"FLEXPROBE_B=x,y"}, map[string]string{"FLEXPROBE_B": "x,y"}},
		{"empty value", []string{"E="}, nil, map[string]string{"E": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-np", "2", "--oversubscribe"}
			for _, x := range tc.x {
				args = append(args, "-x", x)
			}
			args = append(args, bins.probe, "env")
			for _, p := range reports(t, flexrun(t, runOpts{env: tc.env}, args...), 2) {
				for k, v := range tc.want {
					if got, ok := p.Env[k]; !ok || got != v {
						t.Errorf("rank %d: %s=%q (set: %v), want %q", p.Rank, k, got, ok, v)
					}
				}
			}
		})
	}
}

func TestCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "hosts")
	if err := os.WriteFile(bad, []byte("# comment\nlocalhost slots=2\n\nlocalhost slots=two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string   // in stderr
		env  []string // added to flexrun's environment
	}{
		{"no program", []string{"-np", "2"}, 2, "no program given", nil},
		{"unknown flag", []string{"--no-such-flag", "true"}, 2, "flexrun: unknown flag --no-such-flag (see flexrun --help)\n", nil},
		{"unknown flag, near one", []string{"--bind-too", "core", "true"}, 2, "flexrun: unknown flag --bind-too; did you mean --bind-to? (see flexrun --help)\n", nil},
		{"unknown flag with one dash", []string{"-npernodes=2", "true"}, 2, "unknown flag -npernodes; did you mean --npernode?", nil},
		{"plural typo", []string{"--report-binding", "true"}, 2, "unknown flag --report-binding; did you mean --report-bindings?", nil},
		{"bad bind-to", []string{"--bind-to", "socket", "true"}, 1, `--bind-to "socket": want auto, none, core, numa or gpu`, nil},
		{"negative -N", []string{"-N", "-1", "true"}, 1, "-N -1: want 1 or more", nil},
		{"-N and ppr disagree", []string{"-N", "2", "--map-by", "ppr:1:node", "true"}, 1, "-N 2 and --map-by ppr:1:node disagree", nil},
		{"-N above slots", []string{"-N", "3", "-H", "localhost:2", "true"}, 1, "3 ranks per node but host localhost has 2 slots; use --oversubscribe", nil},
		{"bad ppr", []string{"--map-by", "ppr:2:core", "true"}, 1, `ranks per "core" are not supported: want ppr:N:node, ppr:N:numa or ppr:N:socket`, nil},
		{"-N and ppr numa disagree", []string{"-N", "1", "--map-by", "ppr:1:numa", "true"}, 1, "-N 1 and --map-by ppr:1:numa disagree", nil},
		{"both output dirs", []string{"--output-dir", dir, "--output-filename", dir, "true"}, 1, "either --output-dir or --output-filename", nil},
		{"too many ranks", []string{"-np", "5", "-H", "localhost:2,localhost", "true"}, 1, "5 ranks requested but only 3 slots", nil},
		{"max_slots cap", []string{"-np", "3", "--oversubscribe", "--hostfile", writeFile(t, "localhost slots=1 max_slots=2\n"), "true"}, 1, "max_slots reached", nil},
		{"malformed hostfile line", []string{"--hostfile", bad, "true"}, 1, "line 4", nil},
		{"missing hostfile", []string{"--hostfile", filepath.Join(dir, "none"), "true"}, 1, "no such file", nil},
		// ssh runs, but its connection command fails at once: no network.
		{"unreachable host", []string{"-H", "203.0.113.7:4", "--ssh-args", "-o 'ProxyCommand=false'", "true"}, 1,
			"flexrun: cannot start flexrun's agent on 1 host; no rank was started\n  host 203.0.113.7: ssh to 203.0.113.7 exited with status 255", nil},
		{"bad --ssh-args", []string{"-H", "203.0.113.7:4", "--ssh-args", "-o 'x", "true"}, 1, "--ssh-args \"-o 'x\": unclosed single quote", nil},
		{"bad --launcher", []string{"--launcher", "pbs", "true"}, 1, `--launcher "pbs": want ssh or srun`, nil},
		{"both host flags", []string{"-H", "localhost", "--hostfile", bad, "true"}, 1, "either -H or --hostfile", nil},
		{"bad map-by", []string{"--map-by", "socket", "true"}, 1, "want slot, node, ppr:N:node, ppr:N:numa or ppr:N:socket", nil},
		{"program not found", []string{"-np", "1", filepath.Join(dir, "nothing-here")}, 127, "nothing-here", nil},
		{"-x of a rank variable", []string{"-np", "1", "-x", "RANK=3", "true"}, 1, "RANK is set by flexrun", nil},
		{"not a duration", []string{"--timeout", "2x", "true"}, 2, `invalid value "2x" for flag -timeout: want seconds (2, 0.5) or a duration like 90s`, nil},
		{"negative seconds", []string{"--timeout", "-2", "true"}, 2, `invalid value "-2" for flag -timeout: want a duration of 0 or more`, nil},
		{"negative duration", []string{"--kill-grace", "-5s", "true"}, 2, `invalid value "-5s" for flag -kill-grace: want a duration of 0 or more`, nil},
		{"negative -np", []string{"-np", "-1", "true"}, 1, "-np -1: want 1 or more", nil},
		{"no ssh parallelism", []string{"--launch-parallel", "0", "true"}, 1, "--launch-parallel 0: want 1 or more", nil},
		// A zero that would silently mean "the default" is refused.
		{"zero bootstrap timeout", []string{"--bootstrap-timeout", "0s", "true"}, 1, "flexrun: --bootstrap-timeout 0s: want more than 0", nil},
		{"zero liveness timeout", []string{"--liveness-timeout", "0", "true"}, 1, "flexrun: --liveness-timeout 0s: want more than 0", nil},
		{"zero kill grace", []string{"--kill-grace", "0", "true"}, 1, "flexrun: --kill-grace 0s: want more than 0", nil},
		{"zero agent timeout", []string{"--agent-timeout", "0s", "true"}, 1, "flexrun: --agent-timeout 0s: want more than 0", nil},
		{"zero chunk bytes", []string{"-np", "1", "true"}, 1, `flexrun: bad setting: FLEXLINK_CHUNK_BYTES="0": want a size in bytes of 1 or more`, []string{"FLEXLINK_CHUNK_BYTES=0"}},
		{"zero liveness setting", []string{"-np", "1", "true"}, 1, `FLEXLINK_LIVENESS_TIMEOUT="0": want a duration of more than 0`, []string{"FLEXLINK_LIVENESS_TIMEOUT=0"}},
		{"bad settings", []string{"-np", "1", "true"}, 1, "flexrun: 2 bad settings:\n  FLEXLINK_TIMEOUT=\"notaduration\": want a duration", []string{"FLEXLINK_TIMEOUT=notaduration", "FLEXLINK_LINKS=bogus"}},
		{"bad setting through -x", []string{"-np", "1", "-x", "FLEXLINK_ALGO=tree", "true"}, 1, `flexrun: bad setting: FLEXLINK_ALGO="tree": want one of auto, ring, rd`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := flexrun(t, runOpts{env: tc.env}, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tc.code, tc.want)
			}
		})
	}
}

// TestUnknownSettingWarned: a FLEXLINK_ variable the registry does not
// know gets one WARN line naming the nearest setting; the job runs.
func TestUnknownSettingWarned(t *testing.T) {
	r := flexrun(t, runOpts{env: []string{"FLEXLINK_TIMOUT=5s"}}, "-np", "2", "--oversubscribe", "true")
	want := "[WARN]  flexrun: FLEXLINK_TIMOUT is not a flexlink setting (did you mean FLEXLINK_TIMEOUT?); it is ignored\n"
	if r.code != 0 || strings.Count(r.stderr, "FLEXLINK_TIMOUT") != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want exit 0 and one %q", r.code, r.stderr, want)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDryRun(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	// Three visible GPUs, five ranks on one host: GPU = local rank mod 3.
	r := flexrun(t, runOpts{env: []string{"CUDA_VISIBLE_DEVICES=0,1,2"}},
		"--dry-run", "-np", "5", "--oversubscribe", "-H", "localhost:2", "touch", marker)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("--dry-run ran the program")
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 7 || !strings.Contains(lines[0], "5 ranks: touch "+marker) {
		t.Fatalf("dry run output:\n%s", r.stdout)
	}
	if got := strings.Fields(lines[1]); !slices.Equal(got, []string{"RANK", "HOST", "NODE", "LOCAL_RANK", "LOCAL_SIZE", "GPU"}) {
		t.Fatalf("header %q", got)
	}
	for i, line := range lines[2:] {
		gpu := []string{"0", "1", "2"}[i%3]
		want := []string{itoa(i), "localhost", "0", itoa(i), "5", gpu}
		if got := strings.Fields(line); !slices.Equal(got, want) {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	v := flexrun(t, runOpts{}, "--version")
	if v.code != 0 || !strings.HasPrefix(v.stdout, "flexrun version ") {
		t.Errorf("--version: exit %d, %q", v.code, v.stdout)
	}
	h := flexrun(t, runOpts{}, "--help")
	for _, want := range []string{"flexrun [flags] PROGRAM [ARGS...]", "--np N, -n N", "--oversubscribe", "--kill-grace"} {
		if h.code != 0 || !strings.Contains(h.stdout, want) {
			t.Errorf("--help: exit %d, output lacks %q:\n%s", h.code, want, h.stdout)
		}
	}
}
