package capi

import "github.com/flexlink/flexlink/internal/settings"

// DebugEnv is env with NCCL's logging variables (NCCL_DEBUG,
// NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE) read now and answered from then on
// as their FLEXLINK_DEBUG* twins (ncclDebugEnv), the NCCL variables
// themselves hidden; everything else is read from env when asked. So a
// Library whose Options.Env reads through the latest DebugEnv sees NCCL's
// logging variables as they were when it was taken, as NCCL does between
// two ncclResetDebugInit calls: cmd/libnccl takes one at the first call
// and one at each ncclResetDebugInit.
func DebugEnv(env settings.Env) settings.Env {
	mapped := ncclDebugEnv(env)
	return func(k string) (string, bool) {
		switch k {
		case "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE":
			return "", false
		}
		return mapped(k)
	}
}

// ResetDebug is ncclResetDebugInit's part in the library: its own logger
// (failed calls, the rendezvous server) takes the level the environment
// says now (none when neither FLEXLINK_DEBUG nor NCCL_DEBUG is set). Communicators made from now on read the environment when they
// are made; those that exist keep their loggers.
func (l *Library) ResetDebug() {
	l.log.SetLevel(logLevel(l.env))
}
