package capi

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	asyncHelperEnv = "FLEXLINK_CAPI_ASYNC_HELPER"
	asyncReadyLine = "ASYNC HELPER READY"
)

// asyncLimit is how soon every survivor's ncclCommGetAsyncError must
// report a rank's death (issue 30).
const asyncLimit = 2 * time.Second

// TestAsyncErrorOnDeath: a rank dies (SIGKILL) while the others make no
// call; ncclCommGetAsyncError on every survivor reports ncclRemoteError
// within 2 s, and ncclGetLastError on its communicator names the dead
// rank. The survivors are ranks of this process (each from its own
// thread); the victim is a copy of the test binary: the last rank, or
// rank 0 in the process that called ncclGetUniqueId and so serves the
// rendezvous.
func TestAsyncErrorOnDeath(t *testing.T) {
	if os.Getenv(asyncHelperEnv) != "" {
		return // inside the victim: TestAsyncErrorVictim runs
	}
	for _, tc := range []struct {
		n      int
		serves bool // the victim is rank 0 and serves the rendezvous
	}{{2, false}, {4, false}, {2, true}, {4, true}} {
		name := fmt.Sprintf("ranks=%d", tc.n)
		if tc.serves {
			name += "/victim serves the rendezvous"
		}
		t.Run(name, func(t *testing.T) { testAsyncErrorOnDeath(t, tc.n, tc.serves) })
	}
}

// startHelper starts a copy of this test binary running test alone (and
// args), with env added to the environment and its stderr into stderr.
// It returns the process, its stdin, open until closed, and its stdout's
// lines, closed at its end.
func startHelper(ctx context.Context, t *testing.T, test string, stderr io.Writer, env []string, args ...string) (*exec.Cmd, io.WriteCloser, <-chan string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^" + test + "$", "-test.count=1"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, stdin, lines
}

// parseID reads a UniqueID written in hex (what: where from), failing t.
func parseID(t *testing.T, what, s string) UniqueID {
	t.Helper()
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != UniqueIDBytes {
		t.Fatalf("%s: %v", what, err)
	}
	return UniqueID(raw)
}

func testAsyncErrorOnDeath(t *testing.T, n int, serves bool) {
	victim := n - 1
	if serves {
		victim = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := scopeLib()
	var id UniqueID
	env := []string{asyncHelperEnv + "=1", "HELPER_RANK=" + strconv.Itoa(victim), "HELPER_N=" + strconv.Itoa(n)}
	if !serves {
		var err error
		if id, err = l.GetUniqueID(); err != nil {
			t.Fatal(err)
		}
		env = append(env, "HELPER_ID="+hex.EncodeToString(id[:]))
	}
	var stderr strings.Builder
	cmd, _, lines := startHelper(ctx, t, "TestAsyncErrorVictim", &stderr, env) // stdin stays open: the victim waits on it
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan struct{})
	ids := make(chan string, 1)
	go func() {
		for line := range lines {
			if line == asyncReadyLine {
				close(ready)
			}
			if hexID, ok := strings.CutPrefix(line, "ID "); ok {
				ids <- hexID
			}
		}
	}()
	if serves {
		select {
		case hexID := <-ids:
			id = parseID(t, fmt.Sprintf("the victim's id %q", hexID), hexID)
		case <-ctx.Done():
			t.Fatalf("the victim printed no id:\n%s", stderr.String())
		}
	}

	// The survivors join and make one good allreduce with the victim.
	var survivors []int
	for r := range n {
		if r != victim {
			survivors = append(survivors, r)
		}
	}
	hs := make([]uintptr, len(survivors))
	errc := make([]error, len(survivors))
	var wg sync.WaitGroup
	for i, r := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if hs[i], errc[i] = l.InitRank(tidOf(r), n, id, r, DefaultConfig()); errc[i] != nil {
				return
			}
			got, err := allreduce(l, r, hs[i], int64(r+1))
			if err == nil && got != int64(n*(n+1)/2) {
				err = fmt.Errorf("sum %d, want %d", got, n*(n+1)/2)
			}
			errc[i] = err
		}()
	}
	wg.Wait()
	destroyAtEnd(t, l, hs)
	for i, err := range errc {
		if err != nil {
			t.Fatalf("rank %d: %v\nthe victim's stderr:\n%s", survivors[i], err, stderr.String())
		}
	}
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatalf("the victim never finished its allreduce:\n%s", stderr.String())
	}
	for i, h := range hs {
		r := survivors[i]
		if res, err := l.AsyncError(h); err != nil || res != Success {
			t.Fatalf("rank %d before the kill: ncclCommGetAsyncError %v, %v; want ncclSuccess", r, res, err)
		}
	}

	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Every survivor polls, as torch's watchdog does, with no call made.
	took := make([]time.Duration, len(hs))
	for i, h := range hs {
		r := survivors[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := l.AsyncError(h)
				if err != nil {
					t.Errorf("rank %d: ncclCommGetAsyncError: %v", r, err)
					return
				}
				if res != Success {
					took[i] = time.Since(killed)
					if res != RemoteError {
						t.Errorf("rank %d: ncclCommGetAsyncError %v, want ncclRemoteError", r, res)
					}
					return
				}
				if time.Since(killed) > 3*asyncLimit {
					took[i] = time.Since(killed)
					t.Errorf("rank %d: ncclCommGetAsyncError still ncclSuccess %v after the kill", r, took[i])
					return
				}
				select {
				case <-time.After(5 * time.Millisecond): // the watchdog's poll interval
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, h := range hs {
		r := survivors[i]
		if took[i] > asyncLimit {
			t.Errorf("rank %d: the death reported %v after the kill, want within %v", r, took[i], asyncLimit)
		}
		last := l.LastError(h)
		if !strings.Contains(last, "rank "+strconv.Itoa(victim)) {
			t.Errorf("rank %d: ncclGetLastError(comm) %q does not name rank %d", r, last, victim)
		}
		if any := l.LastError(0); !strings.Contains(any, "rank "+strconv.Itoa(victim)) {
			t.Errorf("rank %d: ncclGetLastError(NULL) %q does not name rank %d", r, any, victim)
		}
		t.Logf("rank %d: %v after the kill: %s", r, took[i], last)
	}
}

// TestAsyncErrorVictim is the victim rank of TestAsyncErrorOnDeath (it
// does nothing in a normal run): it joins, makes the allreduce, says so
// and waits to be killed.
func TestAsyncErrorVictim(t *testing.T) {
	if os.Getenv(asyncHelperEnv) == "" {
		return
	}
	r, _ := strconv.Atoi(os.Getenv("HELPER_RANK"))
	n, _ := strconv.Atoi(os.Getenv("HELPER_N"))
	l := scopeLib()
	var id UniqueID
	if hexID := os.Getenv("HELPER_ID"); hexID != "" {
		id = parseID(t, "HELPER_ID", hexID)
	} else { // this process serves the rendezvous
		var err error
		if id, err = l.GetUniqueID(); err != nil {
			t.Fatal(err)
		}
		fmt.Println("ID " + hex.EncodeToString(id[:]))
	}
	h, err := l.InitRank(tidOf(r), n, id, r, DefaultConfig())
	if err != nil {
		t.Fatalf("victim init: %v", err)
	}
	if _, err := allreduce(l, r, h, int64(r+1)); err != nil {
		t.Fatalf("victim allreduce: %v", err)
	}
	fmt.Println(asyncReadyLine)
	_, err = io.ReadAll(os.Stdin)
	t.Fatalf("victim: stdin ended (%v) before the kill", err)
}
