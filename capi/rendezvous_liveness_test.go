package capi

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

const liveHelperEnv = "CAPI_LIVE_HELPER"

// TestLivenessTimeoutSetting: the rendezvous' silence limit is
// FLEXLINK_LIVENESS_TIMEOUT, the setting's default (30 s) when unset; a
// zero or a word is refused with the variable named.
func TestLivenessTimeoutSetting(t *testing.T) {
	for _, tc := range []struct {
		value string // "": unset
		want  time.Duration
		err   bool
	}{{"", 30 * time.Second, false}, {"5s", 5 * time.Second, false}, {"250ms", 250 * time.Millisecond, false}, {"0", 0, true}, {"soon", 0, true}} {
		env := map[string]string{}
		if tc.value != "" {
			env["FLEXLINK_LIVENESS_TIMEOUT"] = tc.value
		}
		l := New(Options{Env: settings.Map(env)})
		got, err := livenessTimeout(l.ids.env)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "FLEXLINK_LIVENESS_TIMEOUT") {
				t.Errorf("%q: %v, %v; want an error naming FLEXLINK_LIVENESS_TIMEOUT", tc.value, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.value, got, err, tc.want)
		}
		if cfg, err := l.rendezvousDial(idInfo{Addr: netipZero()}, 0, 1, "h", nil); err != nil || cfg.PeerTimeout != tc.want {
			t.Errorf("%q: a member dials with PeerTimeout %v (%v), want %v", tc.value, cfg.PeerTimeout, err, tc.want)
		}
	}
}

// TestRendezvousLiveness: the rendezvous an ncclUniqueId names (served
// by the process that made the id) keeps a member that is paused
// (SIGSTOP, 3 s: twice the bootstrap's own 1.5 s limit) under the default
// FLEXLINK_LIVENESS_TIMEOUT: after the pause both members pass a barrier.
// With the limit set to 1 s the same pause loses the member (the other's
// barrier fails naming it), which shows the setting is what keeps it. A
// member whose process is killed is lost at once whatever the limit: the
// other's barrier fails within 2 s naming it. The member is another
// process (a copy of the test binary) that dials the rendezvous as
// ncclCommInitRank does (rendezvousDial), with the same setting.
func TestRendezvousLiveness(t *testing.T) {
	if os.Getenv(liveHelperEnv) != "" {
		return // inside the member: TestRendezvousMemberHelper runs
	}
	for _, tc := range []struct {
		name     string
		liveness string // "": the default
		kill     bool
		survives bool
	}{
		{"paused 3s, default limit", "", false, true},
		{"paused 3s, limit 1s", "1s", false, false},
		{"killed, default limit", "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) { testRendezvousLiveness(t, tc.liveness, tc.kill, tc.survives) })
	}
}

func testRendezvousLiveness(t *testing.T, liveness string, kill, survives bool) {
	env := map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s"}
	if liveness != "" {
		env["FLEXLINK_LIVENESS_TIMEOUT"] = liveness
	}
	l := New(Options{Env: settings.Map(env)})
	port, err := reservePort(settings.OS())
	if err != nil {
		t.Fatal(err)
	}
	info, err := newIDInfo(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)))
	if err != nil {
		t.Fatal(err)
	}
	l.ids.add(info)
	srv, err := l.ids.serve(info, 2, l.log)
	if err != nil {
		t.Fatal(err)
	}
	defer l.ids.unserve(srv)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The member's id: its own copy of the one this process made (it
	// dials as ncclCommInitRank does, rendezvousDial), and its settings.
	raw := info.encode()
	var stderr strings.Builder
	cmd, stdin, lines := startHelper(ctx, t, "TestRendezvousMemberHelper", &stderr,
		[]string{liveHelperEnv + "=1", "HELPER_ID=" + hex.EncodeToString(raw[:]), "HELPER_LIVENESS=" + liveness})
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	cfg, err := l.rendezvousDial(info, 0, 2, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := bootstrap.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if line := <-lines; line != "READY" {
		t.Fatalf("the member said %q, not READY:\n%s", line, stderr.String())
	}

	pid := cmd.Process.Pid
	var start time.Time
	if kill {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
	} else {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// The pause is the scenario under test, not a wait for a condition.
		pause := time.NewTimer(3 * time.Second)
		<-pause.C
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
	}
	bctx, bcancel := context.WithTimeout(ctx, 20*time.Second)
	defer bcancel()
	err = store.Barrier(bctx)
	took := time.Since(start)
	switch {
	case survives:
		if err != nil {
			t.Fatalf("barrier after the pause: %v; member's stderr:\n%s", err, stderr.String())
		}
		if line := <-lines; line != "BARRIER ok" {
			t.Errorf("the member's barrier: %q", line)
		}
	case err == nil:
		t.Fatal("the barrier passed without the member")
	case !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "rank 1"):
		t.Errorf("barrier: %v; want a lost peer naming rank 1", err)
	case kill && took > 2*time.Second:
		t.Errorf("the killed member was found lost after %v, want at most 2s", took)
	default:
		t.Logf("as expected: %v (after %v)", err, took.Round(time.Millisecond))
	}
}

// TestRendezvousMemberHelper is TestRendezvousLiveness's member: rank 1
// of the rendezvous, dialling it as ncclCommInitRank does
// (rendezvousDial: the silence limit FLEXLINK_LIVENESS_TIMEOUT, from
// HELPER_LIVENESS when set).
func TestRendezvousMemberHelper(t *testing.T) {
	if os.Getenv(liveHelperEnv) == "" {
		return
	}
	info, err := decodeID(parseID(t, "HELPER_ID", os.Getenv("HELPER_ID")))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	if v := os.Getenv("HELPER_LIVENESS"); v != "" {
		env["FLEXLINK_LIVENESS_TIMEOUT"] = v
	}
	l := New(Options{Env: settings.Map(env)})
	cfg, err := l.rendezvousDial(info, 1, 2, "member", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := bootstrap.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	fmt.Println("READY")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	if err := store.Barrier(ctx); err != nil {
		fmt.Println("BARRIER " + err.Error())
		return
	}
	fmt.Println("BARRIER ok")
}
