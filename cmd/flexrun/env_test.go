package main

import (
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/settings"
)

func itoa(i int) string { return strconv.Itoa(i) }

// TestRankEnvironment runs 1 to 16 ranks and checks every rank's variables.
func TestRankEnvironment(t *testing.T) {
	for n := 1; n <= 16; n++ {
		t.Run(fmt.Sprintf("np=%d", n), func(t *testing.T) {
			r := flexrun(t, runOpts{env: []string{
				"CUDA_VISIBLE_DEVICES=0,1,2", // FLEXLINK_GPU = local rank mod 3
				"FLEXPROBE_INHERITED=yes",    // flexrun's environment passes through
				"FLEXLINK_RANK=99",           // a stale value is replaced
			}}, "-np", itoa(n), "--oversubscribe", "--bootstrap-timeout", "42s", bins.probe, "env")
			ps := reports(t, r, n)
			first := settings.Map(ps[0].Env)
			pids := map[int]bool{}
			for rank, p := range ps {
				env := settings.Map(p.Env)
				want := map[string]string{
					"FLEXLINK_RANK": itoa(rank), "FLEXLINK_WORLD_SIZE": itoa(n),
					"FLEXLINK_LOCAL_RANK": itoa(rank), "FLEXLINK_LOCAL_SIZE": itoa(n),
					"FLEXLINK_NODE_RANK": "0", "FLEXLINK_GPU": itoa(rank % 3),
					"RANK": itoa(rank), "WORLD_SIZE": itoa(n), "LOCAL_RANK": itoa(rank),
					"LOCAL_WORLD_SIZE": itoa(n), "MASTER_ADDR": "127.0.0.1",
					"FLEXPROBE_INHERITED": "yes",
				}
				for k, v := range want {
					if p.Env[k] != v {
						t.Errorf("rank %d: %s=%q, want %q", rank, k, p.Env[k], v)
					}
				}
				// Job-wide values: the same on every rank.
				for _, k := range []string{"FLEXLINK_BOOTSTRAP", "FLEXLINK_JOB_ID", "FLEXLINK_JOB_SECRET", "MASTER_PORT"} {
					if p.Env[k] == "" || p.Env[k] != ps[0].Env[k] {
						t.Errorf("rank %d: %s=%q, rank 0 has %q", rank, k, p.Env[k], ps[0].Env[k])
					}
				}
				if d, err := env.Duration("FLEXLINK_BOOTSTRAP_TIMEOUT"); err != nil || d != 42*time.Second {
					t.Errorf("rank %d: FLEXLINK_BOOTSTRAP_TIMEOUT=%q (%v), want 42s", rank, p.Env["FLEXLINK_BOOTSTRAP_TIMEOUT"], err)
				}
				if pids[p.PID] {
					t.Errorf("rank %d: pid %d seen twice", rank, p.PID)
				}
				pids[p.PID] = true
			}
			secret, err := hex.DecodeString(first.String("FLEXLINK_JOB_SECRET"))
			if err != nil || len(secret) != 32 {
				t.Errorf("FLEXLINK_JOB_SECRET=%q: want 32 bytes in hex (%v)", ps[0].Env["FLEXLINK_JOB_SECRET"], err)
			}
			host, bport, err := net.SplitHostPort(first.String("FLEXLINK_BOOTSTRAP"))
			if err != nil || host != "127.0.0.1" {
				t.Errorf("FLEXLINK_BOOTSTRAP=%q: want 127.0.0.1:port (%v)", ps[0].Env["FLEXLINK_BOOTSTRAP"], err)
			}
			if mp, err := strconv.Atoi(ps[0].Env["MASTER_PORT"]); err != nil || mp <= 0 || itoa(mp) == bport {
				t.Errorf("MASTER_PORT=%q must be a port other than the bootstrap's %s", ps[0].Env["MASTER_PORT"], bport)
			}
		})
	}
}

// TestRanksJoinBootstrap checks the variables work with the real bootstrap
// server flexrun serves: every rank joins and all-gathers the ranks.
func TestRanksJoinBootstrap(t *testing.T) {
	const n = 4
	r := flexrun(t, runOpts{}, "-np", itoa(n), "--oversubscribe", bins.probe, "join")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	var want []string
	for rank := range n {
		want = append(want, fmt.Sprintf("joined %d: 0 1 2 3", rank))
	}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(got) != n {
		t.Fatalf("output %q, want the lines %q in any order", got, want)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w+"\n") {
			t.Errorf("output lacks %q:\n%s", w, r.stdout)
		}
	}
}
