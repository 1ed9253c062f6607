package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/launcher"
)

// TestBootLog runs a real bootstrap server with flexrun's logger: a rank
// that aborts because it lost a peer is reported as such, a rank whose
// connection drops first is reported lost, and neither shows at ERROR.
func TestBootLog(t *testing.T) {
	tests := []struct {
		name string
		act  func(t *testing.T, st []bootstrap.Store)
		want launcher.BootstrapReport
	}{
		{"abort because of a lost peer", func(t *testing.T, st []bootstrap.Store) {
			_ = st[1].Abort(errors.Join(errors.New("rank 1: shm link to rank 0: control socket closed"), errs.ErrPeerLost))
		}, launcher.BootstrapReport{Rank: 1}},
		{"connection dropped", nil, launcher.BootstrapReport{Rank: 2, Lost: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log := hclog.New(&hclog.LoggerOptions{Name: "flexrun", Level: hclog.Debug, Output: &out})
			reports := make(chan launcher.BootstrapReport, 3)
			srv, err := newBootstrap(launcher.BootstrapConfig{Listen: "127.0.0.1:0", Size: 3, Secret: []byte("s"), JobID: "j", Logger: log, Reports: reports})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var st []bootstrap.Store
			if tc.act != nil {
				st = joinAll(t, srv.Addr(), 3)
				tc.act(t, st)
			} else {
				// Rank 2 is a process that exits 3 without goodbye (as a
				// dying rank does) once all three have passed a barrier.
				st = joinAll(t, srv.Addr(), 2)
				probe := exec.Command(bins.probe, "fail", "2", "3")
				probe.Env = append(os.Environ(), "FLEXLINK_RANK=2", "FLEXLINK_WORLD_SIZE=3", "FLEXLINK_BOOTSTRAP="+srv.Addr(),
					"FLEXLINK_JOB_SECRET="+hex.EncodeToString([]byte("s")), "FLEXLINK_JOB_ID=j")
				if err := probe.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = probe.Process.Kill(); _ = probe.Wait() }()
				for _, s := range st {
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						_ = s.Barrier(ctx)
					}()
				}
			}
			select {
			case r := <-reports:
				if r != tc.want {
					t.Errorf("report %+v, want %+v", r, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no report in 10 s; log:\n%s", out.String())
			}
			for _, s := range st {
				s.Close()
			}
			if strings.Contains(out.String(), "[ERROR]") || !strings.Contains(out.String(), "[DEBUG] flexrun.bootstrap: job failed") {
				t.Errorf("log:\n%s", out.String())
			}
		})
	}
}

func TestFailedRank(t *testing.T) {
	for text, want := range map[string]*launcher.BootstrapReport{
		"bootstrap: job aborted by rank 3: rank 3 on h: allreduce: peer lost":     {Rank: 3},
		"bootstrap: rank 7 on host node-2 lost: connection closed before goodbye": {Rank: 7, Lost: true},
		"bootstrap: job aborted by the launcher: rank 2 exited with status 3":     nil,
		"something else": nil,
	} {
		got, ok := failedRank(text)
		if ok != (want != nil) || ok && got != *want {
			t.Errorf("failedRank(%q) = %+v, %v; want %+v", text, got, ok, want)
		}
	}
}

// joinAll dials ranks 0 to n-1 of a job of 3 into the server at addr.
func joinAll(t *testing.T, addr string, n int) []bootstrap.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := make([]bootstrap.Store, n)
	errc := make(chan error, n)
	for r := range n {
		go func() {
			var err error
			st[r], err = bootstrap.Dial(ctx, bootstrap.DialConfig{Addr: addr, Rank: r, Size: 3, Secret: []byte("s"), JobID: "j", Host: "h"})
			errc <- err
		}()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestBootLogRankLost: every "rank lost" the server logs is reported as
// first-hand, in order, after a second-hand abort too; nothing at ERROR.
func TestBootLogRankLost(t *testing.T) {
	var out bytes.Buffer
	reports := make(chan launcher.BootstrapReport, 4)
	lg := newBootLog(hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &out}), reports).Named("bootstrap")
	lg.Error("job failed", "error", errors.Join(errors.New("bootstrap: job aborted by rank 1: rank 1: shm link to rank 3: closed"), errs.ErrPeerLost))
	lg.Error("rank lost", "rank", 3, "host", "h2", "from", "10.0.0.2:5000", "error", errors.New("EOF"))
	lg.Error("rank lost", "rank", 1, "host", "h1", "from", "10.0.0.1:5000", "error", errors.New("EOF"))
	want := []launcher.BootstrapReport{{Rank: 1}, {Rank: 3, Lost: true}, {Rank: 1, Lost: true}}
	for i, w := range want {
		select {
		case r := <-reports:
			if r != w {
				t.Errorf("report %d: %+v, want %+v", i, r, w)
			}
		default:
			t.Fatalf("report %d missing", i)
		}
	}
	if strings.Contains(out.String(), "[ERROR]") {
		t.Errorf("log:\n%s", out.String())
	}
}
