package capi

import (
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/settings"
)

// TestReportWithheld: reportWithheld makes its words the communicator's
// last error and the process's (ncclGetLastError), a WARN line only with
// NCCL_DEBUG=WARN or more, and, under flexrun, this rank's report of the
// communicator's end on flexrun's store: a timeout in the call, with the
// members' flexrun ranks, put by a connection that names itself a
// reporter (join.IsReporterHost) and says goodbye once it has published;
// a later report joins again (flexrun takes reporters as transient
// members). Outside flexrun nothing joins anything.
func TestReportWithheld(t *testing.T) {
	const behind = "rank 1 has not called AllReduce #5 (its last collective on this communicator: #4)"
	for _, tc := range []struct {
		name    string
		env     map[string]string
		loud    bool
		flexrun bool
	}{
		{name: "silent by default", env: nil},
		{name: "NCCL_DEBUG=WARN", env: map[string]string{"NCCL_DEBUG": "WARN"}, loud: true},
		{name: "under flexrun", env: nil, flexrun: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vars := map[string]string{"NCCL_DEBUG_FILE": filepath.Join(dir, "log.%h.%r"), "FLEXLINK_HOSTNAME": "hx",
				"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s", "FLEXLINK_TIMEOUT": "60s"}
			for k, v := range tc.env {
				vars[k] = v
			}
			events := make(chan bootstrap.Event, 64)
			if tc.flexrun {
				// flexrun's store, as flexrun serves it for a job of 2 ranks;
				// this process is its rank 1.
				secret := []byte("0123456789abcdef0123456789abcdef")
				srv, err := bootstrap.NewServer(bootstrap.ServerConfig{Addr: "127.0.0.1:0", Size: 2, Secret: secret, JobID: "job",
					Transient: join.IsReporterHost,
					OnEvent: func(ev bootstrap.Event) {
						select {
						case events <- ev:
						default:
						}
					}})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				vars["FLEXLINK_RANK"], vars["FLEXLINK_WORLD_SIZE"], vars["FLEXLINK_BOOTSTRAP"] = "1", "2", srv.Addr()
				vars["FLEXLINK_JOB_ID"], vars["FLEXLINK_JOB_SECRET"] = "job", hex.EncodeToString(secret)
			}
			l := New(Options{Env: settings.Map(vars)})
			hs := initRanks(t, l, 2)
			c := l.handles.get(hs[0])
			c.prog.jobs.Store(&[]int{1, 0}) // as askBehind learns them: comm rank 0 is flexrun's rank 1
			start := time.Now()
			c.reportWithheld("AllReduce #5", []string{behind}, nil)
			took := time.Since(start)
			want := "rank 0 of 2: AllReduce #5 did not complete: " + behind
			if got := l.LastError(hs[0]); got != want {
				t.Errorf("ncclGetLastError(comm) = %q, want %q", got, want)
			}
			if got := l.LastError(0); got != want {
				t.Errorf("ncclGetLastError(NULL) = %q, want %q", got, want)
			}
			log := readLog(t, filepath.Join(dir, "log.hx.-1"))
			if warned := strings.Contains(log, "[WARN]") && strings.Contains(log, behind); warned != tc.loud {
				t.Errorf("WARN line with the words: %v, want %v; log:\n%s", warned, tc.loud, log)
			}
			// Bounded by reportWait (the store's own bounds are 2 s and
			// more); a second of slack for a loaded machine.
			if took > reportWait+time.Second {
				t.Errorf("reportWithheld took %v, want about reportWait (%v) at most", took, reportWait)
			}
			if !tc.flexrun {
				return
			}
			// session collects one reporter's session: its events up to
			// its goodbye, and the end it put.
			session := func() ([]bootstrap.EventKind, comm.EndReport) {
				t.Helper()
				var seen []bootstrap.EventKind
				var end comm.EndReport
				deadline := time.After(10 * time.Second)
				for !slices.Contains(seen, bootstrap.EventLeft) {
					select {
					case ev := <-events:
						seen = append(seen, ev.Kind)
						if ev.Rank != 1 {
							t.Errorf("%v event of rank %d, want flexrun's rank 1", ev.Kind, ev.Rank)
						}
						if (ev.Kind == bootstrap.EventJoined || ev.Kind == bootstrap.EventLeft) && !join.IsReporterHost(ev.Host) {
							t.Errorf("%v as host %q, not a reporter's", ev.Kind, ev.Host)
						}
						if ev.Kind == bootstrap.EventPut {
							var ok bool
							if end, ok = comm.DecodeEnd(ev.Key, ev.Value); !ok {
								t.Errorf("put %q is no communicator's end", ev.Key)
							}
						}
					case <-deadline:
						t.Fatalf("events %v: no goodbye within 10 s", seen)
					}
				}
				return seen, end
			}
			joinPutLeft := []bootstrap.EventKind{bootstrap.EventJoined, bootstrap.EventPut, bootstrap.EventLeft}
			seen, end := session()
			if !slices.Equal(seen, joinPutLeft) {
				t.Errorf("events %v, want joined, put, left", seen)
			}
			if !strings.HasPrefix(end.Comm, "nccl@") || !strings.HasSuffix(end.Comm, "/w") || end.Kind != "timeout" ||
				end.InCall != "AllReduce #5" || end.Text != want || !slices.Equal(end.Members, []int{1, 0}) || end.ClosedBy != -1 {
				t.Errorf("published %+v; want a timeout in AllReduce #5 on nccl@.../w, members [1 0], the words %q", end, want)
			}
			// A second report after the goodbye joins again (TestReportSessions:
			// an older flexrun refuses it).
			c.reportWithheld("AllReduce #6", []string{strings.ReplaceAll(behind, "#5", "#6")}, nil)
			seen, again := session()
			if !slices.Equal(seen, joinPutLeft) {
				t.Errorf("the second report: events %v, want joined, put, left", seen)
			}
			if again.Comm != end.Comm || again.Kind != "timeout" || again.InCall != "AllReduce #6" {
				t.Errorf("the second report: published %+v, want a timeout in AllReduce #6 on %s", again, end.Comm)
			}
		})
	}
}
