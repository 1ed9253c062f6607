package capi

import (
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

// TestParams checks the parameters ncclParam* serves against their
// sources: settings.Table and NCCL's three logging variables, values from
// the environment or else the defaults.
func TestParams(t *testing.T) {
	ps := Params()
	if want := len(settings.Table) + 3; len(ps) != want {
		t.Fatalf("%d parameters, want %d (settings.Table and NCCL_DEBUG*)", len(ps), want)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if seen[p.Key] {
			t.Errorf("key %s twice", p.Key)
		}
		seen[p.Key] = true
	}
	env := settings.Map(map[string]string{"FLEXLINK_DEBUG": "INFO", "NCCL_DEBUG": "TRACE", "NCCL_DEBUG_FILE": ""})
	s := settings.Table[0]
	tests := []struct {
		key, want string
	}{
		{"FLEXLINK_DEBUG", "INFO"},
		{"NCCL_DEBUG", "TRACE"},
		{"NCCL_DEBUG_FILE", ""}, // set but empty: the default
		{"NCCL_DEBUG_SUBSYS", ""},
		{s.Name, map[bool]string{true: "INFO", false: s.Default}[s.Name == "FLEXLINK_DEBUG"]},
	}
	for _, sv := range settings.Table {
		if sv.Name != "FLEXLINK_DEBUG" {
			tests = append(tests, struct{ key, want string }{sv.Name, sv.Default})
		}
	}
	for _, tc := range tests {
		i, err := ParamIndex(tc.key)
		if err != nil {
			t.Errorf("ParamIndex(%s): %v", tc.key, err)
			continue
		}
		if got, err := ParamValue(env, i); err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.key, got, err, tc.want)
		}
	}
	for _, key := range []string{"NCCL_P2P_LEVEL", "FLEXLINK_NO_SUCH", ""} {
		if _, err := ParamIndex(key); ResultOf(err) != InvalidArgument || !strings.Contains(err.Error(), "not a parameter") {
			t.Errorf("ParamIndex(%q): %v, want ncclInvalidArgument", key, err)
		}
	}
	for _, i := range []int{-1, len(ps)} {
		if _, err := ParamValue(env, i); ResultOf(err) != InvalidArgument {
			t.Errorf("ParamValue(%d): %v, want ncclInvalidArgument", i, err)
		}
	}
	if err := ParamTypeMismatch("ncclParamGetI32", 0); ResultOf(err) != InvalidArgument || !strings.Contains(err.Error(), ps[0].Key) {
		t.Errorf("type mismatch: %v", err)
	}
	dump := ParamDump(env)
	for _, p := range ps {
		if !strings.Contains(dump, p.Key+" (string)") {
			t.Errorf("ncclParamDumpAll lacks %s", p.Key)
		}
	}
}

// TestDebugEnv checks the snapshot ncclResetDebugInit takes: NCCL's
// logging variables are read when it is taken and answered as their
// FLEXLINK_DEBUG* twins, hidden themselves; other variables stay live, and
// a FLEXLINK_DEBUG* that is set wins.
func TestDebugEnv(t *testing.T) {
	vars := map[string]string{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING", "FLEXLINK_TIMEOUT": "5s"}
	env := settings.Env(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	snap := DebugEnv(env)
	vars["NCCL_DEBUG"] = "WARN" // changed after the snapshot: not seen until the next one
	vars["FLEXLINK_TIMEOUT"] = "7s"
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"FLEXLINK_DEBUG", "INFO", true},
		{"FLEXLINK_DEBUG_SUBSYS", "INIT", true},
		{"NCCL_DEBUG", "", false},
		{"NCCL_DEBUG_SUBSYS", "", false},
		{"FLEXLINK_TIMEOUT", "7s", true},
	}
	for _, tc := range tests {
		if v, ok := snap(tc.key); v != tc.want || ok != tc.ok {
			t.Errorf("%s = %q, %v; want %q, %v", tc.key, v, ok, tc.want, tc.ok)
		}
	}
	if v, _ := DebugEnv(env)("FLEXLINK_DEBUG"); v != "WARN" {
		t.Errorf("a new snapshot: FLEXLINK_DEBUG = %q, want WARN", v)
	}
	vars["FLEXLINK_DEBUG"] = "TRACE"
	if v, _ := snap("FLEXLINK_DEBUG"); v != "TRACE" {
		t.Errorf("FLEXLINK_DEBUG set: %q, want it to win (TRACE)", v)
	}
}
