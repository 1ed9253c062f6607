package capi

import (
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/internal/settings"
)

// NCCL 2.30's ncclParam* functions read the library's parameters by name:
// a key (the environment variable, NCCL_DEBUG), a typed value, its text.
// flexlink's parameters are its settings (internal/settings.Table, the
// FLEXLINK_* variables) and the NCCL logging variables it honours
// (ncclDebugEnv). Every one is a string parameter, as NCCL's const char*
// ones: ncclParamGetStr, ncclParamGet (the text with its NUL) and
// ncclParamGetParameter read it; the typed getters fail with
// ncclInvalidArgument, as NCCL's do on a parameter of another type. NCCL's
// own keys other than those three (NCCL_P2P_LEVEL, ...) are not
// parameters here: binding them fails as for an unknown key.

// Param is one parameter.
type Param struct {
	Key     string
	Default string
	Doc     string
}

var ncclParams = []Param{
	{"NCCL_DEBUG", "", "NCCL's log level; flexlink reads WARN, INFO, TRACE (VERSION as WARN) as FLEXLINK_DEBUG when that is unset"},
	{"NCCL_DEBUG_SUBSYS", "", "NCCL's log subsystems; flexlink keeps those it knows as FLEXLINK_DEBUG_SUBSYS when that is unset"},
	{"NCCL_DEBUG_FILE", "", "NCCL's log file pattern; flexlink uses it as FLEXLINK_DEBUG_FILE when that is unset"},
}

// Params lists the parameters: settings.Table in its order, then the NCCL
// logging variables.
func Params() []Param {
	ps := make([]Param, 0, len(settings.Table)+len(ncclParams))
	for _, s := range settings.Table {
		ps = append(ps, Param{s.Name, s.Default, s.Doc})
	}
	return append(ps, ncclParams...)
}

// ParamIndex is ncclParamBind's lookup: the index of key in Params.
func ParamIndex(key string) (int, error) {
	for i, p := range Params() {
		if p.Key == key {
			return i, nil
		}
	}
	return 0, fail(InvalidArgument, "ncclParamBind: %q is not a parameter of flexlink's libnccl (its parameters are the FLEXLINK_* settings and NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE)", key)
}

// ParamValue is parameter i's text: its variable in env when set and not
// empty, else its default.
func ParamValue(env settings.Env, i int) (string, error) {
	ps := Params()
	if i < 0 || i >= len(ps) {
		return "", fail(InvalidArgument, "ncclParam: handle %d is not a parameter handle", i+1)
	}
	if v, ok := env(ps[i].Key); ok && v != "" {
		return v, nil
	}
	return ps[i].Default, nil
}

// ParamTypeMismatch is what a typed getter (ncclParamGetI32, ...) of
// function fn returns for parameter i: every parameter is a string.
func ParamTypeMismatch(fn string, i int) error {
	key := "?"
	if ps := Params(); i >= 0 && i < len(ps) {
		key = ps[i].Key
	}
	return fail(InvalidArgument, "%s: parameter %s is a string (every parameter of flexlink's libnccl is): read it with ncclParamGetStr or ncclParamGet", fn, key)
}

// ParamDump is ncclParamDumpAll's text: each parameter, its value and
// default, and what it means.
func ParamDump(env settings.Env) string {
	var b strings.Builder
	b.WriteString("=== flexlink libnccl parameters ===\n")
	for i, p := range Params() {
		v, _ := ParamValue(env, i)
		fmt.Fprintf(&b, "%s (string) value=%q default=%q\n    %s\n", p.Key, v, p.Default, p.Doc)
	}
	return b.String()
}
