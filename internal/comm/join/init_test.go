package join

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

func getenvMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestReadSlurmStep(t *testing.T) {
	step := map[string]string{
		"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_STEP_NODELIST": "gpu[03-04],gpu07", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "gpu07",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range step {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		inStep  bool
		want    slurmStep
		wantErr string
	}{
		{"step", step, true, slurmStep{procID: 5, ntasks: 8, localID: 1, nodeID: 2, nodes: []string{"gpu03", "gpu04", "gpu07"},
			jobID: "4242", stepID: "0", nodeName: "gpu07"}, ""},
		{"batch script: no step", with("SLURM_STEP_ID", ""), false, slurmStep{}, "SLURM_STEP_ID"},
		{"one task", with("SLURM_STEP_NUM_TASKS", "1"), false, slurmStep{}, "out of range"},
		{"bad rank", with("SLURM_PROCID", "x"), true, slurmStep{}, `SLURM_PROCID="x"`},
		{"rank past world", with("SLURM_PROCID", "8"), true, slurmStep{}, "out of range"},
		{"bad nodelist", with("SLURM_STEP_NODELIST", "gpu[1-"), true, slurmStep{}, "SLURM_STEP_NODELIST"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := inSlurmStep(getenvMap(tc.env)); got != tc.inStep {
				t.Errorf("inSlurmStep = %v, want %v", got, tc.inStep)
			}
			got, err := readSlurmStep(getenvMap(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.procID != tc.want.procID || got.ntasks != tc.want.ntasks || got.localID != tc.want.localID ||
				got.nodeID != tc.want.nodeID || strings.Join(got.nodes, ",") != strings.Join(tc.want.nodes, ",") ||
				got.jobID != tc.want.jobID || got.stepID != tc.want.stepID || got.nodeName != tc.want.nodeName {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestSlurmPort(t *testing.T) {
	env := settings.Map(nil)
	a, _ := slurmPort(env, "4242", "0")
	b, _ := slurmPort(env, "4242", "1")
	if a < 20000 || a > 29999 || b < 20000 || b > 29999 || a == b {
		t.Errorf("ports %d, %d: want two different ports in 20000-29999", a, b)
	}
	if again, _ := slurmPort(env, "4242", "0"); again != a {
		t.Errorf("port of the same step differs: %d then %d", a, again)
	}
	if p, err := slurmPort(settings.Map(map[string]string{"FLEXLINK_SLURM_PORT": "31337"}), "1", "0"); p != 31337 || err != nil {
		t.Errorf("override: %d, %v", p, err)
	}
	if _, err := slurmPort(settings.Map(map[string]string{"FLEXLINK_SLURM_PORT": "99999"}), "1", "0"); err == nil {
		t.Error("port 99999 accepted")
	}
}

func TestJobSecret(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "sub", "job.key")
	env := settings.Map(map[string]string{"FLEXLINK_KEY_FILE": key})
	// Tasks racing to create the key all end up with the same one.
	var wg sync.WaitGroup
	secrets := make([][]byte, 8)
	for i := range secrets {
		wg.Go(func() {
			s, _, err := jobSecret(env, "slurm 1.0")
			if err != nil {
				t.Error(err)
			}
			secrets[i] = s
		})
	}
	wg.Wait()
	for _, s := range secrets[1:] {
		if !bytes.Equal(s, secrets[0]) || len(s) != 32 {
			t.Fatalf("secrets differ: %x vs %x", s, secrets[0])
		}
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, st.Mode())
	}
	other, _, _ := jobSecret(env, "slurm 1.1")
	if bytes.Equal(other, secrets[0]) {
		t.Error("two steps got the same secret")
	}
	given, _, err := jobSecret(settings.Map(map[string]string{"FLEXLINK_JOB_SECRET": "00ff", "FLEXLINK_KEY_FILE": key}), "x")
	if err != nil || !bytes.Equal(given, []byte{0, 0xff}) {
		t.Errorf("FLEXLINK_JOB_SECRET: %x, %v", given, err)
	}
	os.Chmod(key, 0o644)
	if _, _, err := jobSecret(env, "slurm 1.0"); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key: %v", err)
	}
	os.WriteFile(key, []byte("short\n"), 0o600)
	os.Chmod(key, 0o600)
	if _, _, err := jobSecret(env, "slurm 1.0"); err == nil || !strings.Contains(err.Error(), "at least 16 bytes") {
		t.Errorf("bad key: %v", err)
	}
}

func TestReadOMPI(t *testing.T) {
	w, err := readOMPI(getenvMap(map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
		"OMPI_MCA_ess_base_jobid": "386072577", "OMPI_MCA_orte_hnp_uri": "386072576.0;tcp://10.0.0.1:5"}))
	if err != nil || w.rank != 3 || w.size != 4 || w.jobID != "386072577" || w.hnpURI == "" {
		t.Errorf("got %+v, %v", w, err)
	}
	if _, err := readOMPI(getenvMap(map[string]string{"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"})); err == nil {
		t.Error("rank 4 of 4 accepted")
	}
}
