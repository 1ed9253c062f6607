package launcher

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// jobEnv is what the environments of all ranks of a job share.
type jobEnv struct {
	Size             int
	Bootstrap        string // host:port of the bootstrap store
	JobID            string
	Secret           string // hex
	BootstrapTimeout time.Duration
	LivenessTimeout  time.Duration // 0 (tests): not set
	MasterAddr       string        // PyTorch env:// rendezvous host
	MasterPort       int           // PyTorch env:// rendezvous port, not the bootstrap's
}

// liveness is FLEXLINK_LIVENESS_TIMEOUT's value ("" when unset: the
// setting's default).
func (je jobEnv) liveness() string {
	if je.LivenessTimeout <= 0 {
		return ""
	}
	return je.LivenessTimeout.String()
}

// isRankVar reports whether flexrun sets key for each rank (so -x may not).
func isRankVar(key string) bool {
	_, ok := lookupEnv(rankEnv(nil, jobEnv{}, Placement{}), key)
	return ok
}

// applyExports applies -x arguments to environ (flexrun's environment, which
// ranks inherit anyway): "VAR=value" sets VAR for the ranks (the value is
// kept whole, commas included); "VAR" exports flexrun's own VAR, and yields
// a warning when flexrun has no VAR. It returns the new environment.
func applyExports(environ, exports []string) (env []string, warnings []string, err error) {
	env = slices.Clone(environ)
	for _, x := range exports {
		key, val, hasVal := strings.Cut(x, "=")
		if key == "" || strings.ContainsAny(key, " \t\n") {
			return nil, nil, fmt.Errorf("-x %q: want VAR or VAR=value", x)
		}
		if isRankVar(key) {
			return nil, nil, fmt.Errorf("-x %q: %s is set by flexrun for each rank", x, key)
		}
		if !hasVal {
			if _, ok := lookupEnv(env, key); !ok {
				warnings = append(warnings, fmt.Sprintf("-x %s: %s is not set in flexrun's environment; not exported", key, key))
			}
			continue
		}
		env = setEnv(env, key, val)
	}
	return env, warnings, nil
}

// rankEnv returns the environment of the rank at p: base plus the
// FLEXLINK_* variables of the rank runtime and the variables PyTorch's
// env:// initialisation reads.
func rankEnv(base []string, je jobEnv, p Placement) []string {
	vars := [][2]string{
		{"FLEXLINK_RANK", strconv.Itoa(p.Rank)},
		{"FLEXLINK_WORLD_SIZE", strconv.Itoa(je.Size)},
		{"FLEXLINK_LOCAL_RANK", strconv.Itoa(p.LocalRank)},
		{"FLEXLINK_LOCAL_SIZE", strconv.Itoa(p.LocalSize)},
		{"FLEXLINK_NODE_RANK", strconv.Itoa(p.NodeRank)},
		{"FLEXLINK_BOOTSTRAP", je.Bootstrap},
		{"FLEXLINK_JOB_ID", je.JobID},
		{"FLEXLINK_JOB_SECRET", je.Secret},
		{"FLEXLINK_BOOTSTRAP_TIMEOUT", je.BootstrapTimeout.String()},
		{"FLEXLINK_LIVENESS_TIMEOUT", je.liveness()},
		{"FLEXLINK_GPU", strconv.Itoa(p.GPU)},
		{"RANK", strconv.Itoa(p.Rank)},
		{"WORLD_SIZE", strconv.Itoa(je.Size)},
		{"LOCAL_RANK", strconv.Itoa(p.LocalRank)},
		{"LOCAL_WORLD_SIZE", strconv.Itoa(p.LocalSize)},
		{"MASTER_ADDR", je.MasterAddr},
		{"MASTER_PORT", strconv.Itoa(je.MasterPort)},
	}
	env := slices.Clone(base)
	for _, kv := range vars {
		env = setEnv(env, kv[0], kv[1])
	}
	return env
}

// setEnv sets key=val in env, dropping earlier settings of key.
func setEnv(env []string, key, val string) []string {
	env = slices.DeleteFunc(env, func(e string) bool {
		k, _, _ := strings.Cut(e, "=")
		return k == key
	})
	return append(env, key+"="+val)
}
