package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/flexlink/flexlink/internal/settings"
)

// profileStop ends the profile startProfile began (nil: none running).
var profileStop = func() {}

// startProfile writes a CPU profile of the library's Go code to
// FLEXLINK_CPU_PROFILE from the first NCCL call until
// FLEXLINK_CPU_PROFILE_SECONDS have passed or a communicator is destroyed,
// whichever comes first (a C library gets no exit hook). For finding where
// a call's host time goes (`go tool pprof FILE`). Set once, from lib's
// sync.Once, before any communicator exists.
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
	var once sync.Once
	profileStop = func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
	time.AfterFunc(time.Duration(secs)*time.Second, profileStop)
}

// startStackDump writes every goroutine's stack of the library to stderr
// once FLEXLINK_STACK_DUMP_AFTER has passed since the first NCCL call (a
// job that hangs shows where each rank's library waits; a C library's
// process gets no SIGQUIT dump from Go).
func startStackDump(env settings.Env) {
	d, err := env.Duration("FLEXLINK_STACK_DUMP_AFTER")
	if err != nil {
		fmt.Fprintf(os.Stderr, "flexlink: %v\n", err)
		return
	}
	if d <= 0 {
		return
	}
	time.AfterFunc(d, func() {
		fmt.Fprintf(os.Stderr, "flexlink: pid %d: goroutines after FLEXLINK_STACK_DUMP_AFTER=%v:\n", os.Getpid(), d)
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
	})
}
