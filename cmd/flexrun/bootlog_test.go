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

// TestBootLog runs a real bootstrap server with flexrun's logger and
// report hook: a rank that aborts because it lost a peer is reported as
// such, a rank whose connection drops first is reported lost, every rank
// is reported joined, and neither failure shows at ERROR.
func TestBootLog(t *testing.T) {
	host, _ := os.Hostname() // the probe's (DialConfig.Host's default)
	tests := []struct {
		name string
		act  func(t *testing.T, st []bootstrap.Store)
		want launcher.BootstrapReport
	}{
		{"abort because of a lost peer", func(t *testing.T, st []bootstrap.Store) {
			_ = st[1].Abort(errors.Join(errors.New("rank 1: shm link to rank 0: control socket closed"), errs.ErrPeerLost))
		}, launcher.BootstrapReport{Kind: launcher.ReportAbort, Rank: 1, Text: "bootstrap: job aborted by rank 1: rank 1: shm link to rank 0: control socket closed\npeer lost"}},
		{"connection dropped", nil, launcher.BootstrapReport{Kind: launcher.ReportLost, Rank: 2, Host: host, Text: "connection closed before goodbye"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log := hclog.New(&hclog.LoggerOptions{Name: "flexrun", Level: hclog.Debug, Output: &out})
			reports := make(chan launcher.BootstrapReport, 16)
			report := func(r launcher.BootstrapReport) {
				select {
				case reports <- r:
				default:
					t.Errorf("report %+v: more reports than the test expects", r)
				}
			}
			srv, err := newBootstrap(launcher.BootstrapConfig{Listen: "127.0.0.1:0", Size: 3, Secret: []byte("s"), JobID: "j", Logger: log, Report: report})
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
			joined := map[int]bool{}
			deadline := time.After(10 * time.Second)
		wait:
			for {
				select {
				case r := <-reports:
					if r.Kind == launcher.ReportJoined {
						joined[r.Rank] = true
						continue
					}
					if r.Kind == tc.want.Kind {
						if r != tc.want {
							t.Errorf("report %+v, want %+v", r, tc.want)
						}
						break wait
					}
				case <-deadline:
					t.Fatalf("no report in 10 s; log:\n%s", out.String())
				}
			}
			if len(joined) != 3 {
				t.Errorf("joined reports for ranks %v, want 0, 1, 2", joined)
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
