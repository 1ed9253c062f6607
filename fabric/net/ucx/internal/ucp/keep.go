package ucp

import "runtime"

// runtimeKeep keeps v reachable until this point (a buffer whose address
// was handed to a synchronous call as uintptr).
func runtimeKeep(v any) { runtime.KeepAlive(v) }
