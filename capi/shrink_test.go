package capi

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestShrinkAfterKill is ncclCommShrink's main use, with real processes:
// this test process is rank 0 (and serves the rendezvous, as the process
// that called ncclGetUniqueId does), ranks 1-3 are copies of the test
// binary. Once every rank has finished one good allreduce, this process
// kills rank 3 (SIGKILL); the survivors' next allreduce on the world
// fails (ncclRemoteError, naming rank 3 and its host) instead of hanging;
// they shrink rank 3 away and an allreduce on the shrunk communicator
// gives the survivors' sum.
func TestShrinkAfterKill(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		return // inside a helper rank: TestShrinkRank runs
	}
	const n, victim = 4, 3
	for _, flags := range []int{ShrinkDefault, ShrinkAbort} {
		t.Run(fmt.Sprintf("flags=%d", flags), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			l := scopeLib()
			id, err := l.GetUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			outs := make([]strings.Builder, n)
			cmds := make([]*exec.Cmd, n)
			ready := make(chan int, n)
			var copies sync.WaitGroup
			for r := 1; r < n; r++ {
				// The helper prints readyLine after its first allreduce; the
				// victim then waits on its stdin, which stays open.
				cmd, _, lines := startHelper(ctx, t, "TestShrinkRank", &outs[r], []string{helperEnv + "=1", "HELPER_ID=" + hex.EncodeToString(id[:]),
					"HELPER_RANK=" + strconv.Itoa(r), "HELPER_N=" + strconv.Itoa(n), "HELPER_VICTIM=" + strconv.Itoa(victim),
					"HELPER_FLAGS=" + strconv.Itoa(flags)}, "-test.v")
				cmds[r] = cmd
				copies.Add(1)
				go func() {
					defer copies.Done()
					for line := range lines {
						if line == readyLine {
							ready <- r
						}
					}
				}()
			}
			killVictim := func() {
				for range n - 1 {
					select {
					case <-ready:
					case <-ctx.Done():
						return
					}
				}
				_ = cmds[victim].Process.Kill()
			}
			if err := shrinkRank(l, id, 0, n, victim, flags, killVictim); err != nil {
				t.Errorf("rank 0: %v", err)
			}
			copies.Wait()
			errc := make([]error, n)
			for r := 1; r < n; r++ {
				errc[r] = cmds[r].Wait()
			}
			for r := 1; r < n; r++ {
				var ee *exec.ExitError
				switch {
				case r == victim:
					if !errors.As(errc[r], &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
						t.Errorf("victim rank %d: %v, want killed by SIGKILL\n%s", r, errc[r], outs[r].String())
					}
				case errc[r] != nil:
					t.Errorf("rank %d: %v\n%s", r, errc[r], outs[r].String())
				}
			}
		})
	}
}

const (
	helperEnv = "FLEXLINK_CAPI_SHRINK_HELPER"
	readyLine = "FIRST ALLREDUCE DONE"
)

// TestShrinkRank is one helper rank of TestShrinkAfterKill (it does
// nothing in a normal run).
func TestShrinkRank(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return
	}
	atoi := func(k string) int { v, _ := strconv.Atoi(os.Getenv(k)); return v }
	id := parseID(t, "HELPER_ID", os.Getenv("HELPER_ID"))
	r, victim := atoi("HELPER_RANK"), atoi("HELPER_VICTIM")
	ready := func() {
		fmt.Println(readyLine)
		if r == victim { // wait to be killed
			_, err := io.ReadAll(os.Stdin)
			t.Fatalf("victim: stdin ended (%v) before the kill", err)
		}
	}
	if err := shrinkRank(scopeLib(), id, r, atoi("HELPER_N"), victim, atoi("HELPER_FLAGS"), ready); err != nil {
		t.Fatal(err)
	}
}

// shrinkRank is one rank of TestShrinkAfterKill; it calls ready after
// its first allreduce.
func shrinkRank(l *Library, id UniqueID, r, n, victim, flags int, ready func()) error {
	host, _ := os.Hostname()
	h, err := l.InitRank(tidOf(r), n, id, r, DefaultConfig())
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if got, err := allreduce(l, r, h, int64(r+1)); err != nil || got != int64(n*(n+1)/2) {
		return fmt.Errorf("first allreduce: %d, %v", got, err)
	}
	ready()
	start := time.Now()
	_, err = allreduce(l, r, h, 1)
	if ResultOf(err) != RemoteError {
		return fmt.Errorf("allreduce with a dead peer: %v (%v), want ncclRemoteError", ResultOf(err), err)
	}
	last := l.LastError(h)
	for _, s := range []string{"rank " + strconv.Itoa(victim), host} {
		if !strings.Contains(last, s) {
			return fmt.Errorf("the dead peer's error %q does not name %q", last, s)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		return fmt.Errorf("the dead peer was noticed after %v", d)
	}
	s, err := l.Shrink(tidOf(r), h, []int{victim}, DefaultConfig(), flags)
	if err != nil {
		return fmt.Errorf("shrink: %w", err)
	}
	want := int64(0)
	for q := range n {
		if q != victim {
			want += int64(q + 1)
		}
	}
	if got, err := allreduce(l, r, s, int64(r+1)); err != nil || got != want {
		return fmt.Errorf("allreduce on the shrunk communicator: %d, %v; want %d", got, err, want)
	}
	if err := l.Destroy(s); err != nil {
		return err
	}
	return l.Destroy(h)
}
