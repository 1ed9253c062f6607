package launcher

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

func TestApplyExports(t *testing.T) {
	base := []string{"PATH=/bin", "KEEP=1", "HOME=/root"}
	tests := []struct {
		name     string
		exports  []string
		want     []string
		warnings int
		wantErr  string
	}{
		{"none", nil, base, 0, ""},
		{"set with commas", []string{"A=1,2,3"}, append(slices.Clone(base), "A=1,2,3"), 0, ""},
		{"override moves to the end", []string{"KEEP=2"}, []string{"PATH=/bin", "HOME=/root", "KEEP=2"}, 0, ""},
		{"bare name of a set variable", []string{"HOME"}, base, 0, ""},
		{"bare name of an unset variable warns", []string{"NOPE"}, base, 1, ""},
		{"value with equals", []string{"O=a=b"}, append(slices.Clone(base), "O=a=b"), 0, ""},
		{"empty name", []string{"=x"}, nil, 0, "want VAR or VAR=value"},
		{"rank variable", []string{"FLEXLINK_RANK=1"}, nil, 0, "set by flexrun for each rank"},
		{"pytorch variable", []string{"MASTER_PORT=1"}, nil, 0, "set by flexrun for each rank"},
		{"other FLEXLINK setting allowed", []string{"FLEXLINK_DEBUG=INFO"}, append(slices.Clone(base), "FLEXLINK_DEBUG=INFO"), 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings, err := applyExports(base, tc.exports)
			testenv.WantErr(t, err, tc.wantErr)
			if tc.wantErr != "" {
				return
			}
			if !reflect.DeepEqual(got, tc.want) || len(warnings) != tc.warnings {
				t.Errorf("got %q (warnings %q), want %q (%d warnings)", got, warnings, tc.want, tc.warnings)
			}
		})
	}
}

func TestRankEnv(t *testing.T) {
	je := jobEnv{Size: 8, Bootstrap: "127.0.0.1:4000", JobID: "j1", Secret: "ab", BootstrapTimeout: 90 * time.Second, MasterAddr: "127.0.0.1", MasterPort: 4001}
	base := []string{"RANK=77", "FLEXLINK_GPU=5", "OTHER=x"}
	p := Placement{Rank: 5, Host: "h", NodeRank: 1, LocalRank: 1, LocalSize: 4, GPU: -1}
	env := rankEnv(base, je, p)
	want := map[string]string{
		"FLEXLINK_RANK": "5", "FLEXLINK_WORLD_SIZE": "8", "FLEXLINK_LOCAL_RANK": "1", "FLEXLINK_LOCAL_SIZE": "4",
		"FLEXLINK_NODE_RANK": "1", "FLEXLINK_BOOTSTRAP": "127.0.0.1:4000", "FLEXLINK_JOB_ID": "j1",
		"FLEXLINK_JOB_SECRET": "ab", "FLEXLINK_GPU": "-1",
		"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "4001", "OTHER": "x",
	}
	seen := map[string]int{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		seen[k]++
	}
	for k, v := range want {
		if got, ok := lookupEnv(env, k); !ok || got != v || seen[k] != 1 {
			t.Errorf("%s=%q (set %d times), want %q once", k, got, seen[k], v)
		}
	}
	// The rank runtime reads the timeout through settings.
	d, err := settings.Map(envMap(env)).Duration("FLEXLINK_BOOTSTRAP_TIMEOUT")
	if err != nil || d != 90*time.Second {
		t.Errorf("FLEXLINK_BOOTSTRAP_TIMEOUT reads back as %v, %v", d, err)
	}
	// Every FLEXLINK_* variable set is declared in settings.Table (String
	// panics on undeclared names).
	for k := range seen {
		if strings.HasPrefix(k, "FLEXLINK_") {
			_ = settings.Map(nil).String(k)
		}
	}
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
