package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/flexlink/flexlink/internal/settings"
)

// startProfile writes a CPU profile of the library's Go code to
// FLEXLINK_CPU_PROFILE for FLEXLINK_CPU_PROFILE_SECONDS from the first
// NCCL call (a program linked against libnccl has no other place to stop
// it: a C library gets no exit hook). For finding where a call's host
// time goes (`go tool pprof libnccl.so.2 FILE`).
func startProfile(env settings.Env) {
	path := env.String("FLEXLINK_CPU_PROFILE")
	if path == "" {
		return
	}
	secs, err := env.Int("FLEXLINK_CPU_PROFILE_SECONDS")
	if err != nil {
		fmt.Fprintf(os.Stderr, "flexlink: %v\n", err)
		return
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "flexlink: FLEXLINK_CPU_PROFILE: %v\n", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "flexlink: FLEXLINK_CPU_PROFILE: %v\n", err)
		f.Close()
		return
	}
	time.AfterFunc(time.Duration(secs)*time.Second, func() {
		pprof.StopCPUProfile()
		f.Close()
	})
}
