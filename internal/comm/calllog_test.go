package comm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/flog"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// runLogged runs body on n in-process ranks over shm, each rank logging
// through join.NewLogger with vars into its own FLEXLINK_DEBUG_FILE
// (dir/rank.%r), and returns every rank's log.
func runLogged(t *testing.T, n int, vars map[string]string, body func(c *Comm) error) []string {
	t.Helper()
	return runLoggedHosts(t, n, vars, func(int) string { return "testhost" }, body)
}

// runLoggedHosts is runLogged with rank r on host hostOf(r).
func runLoggedHosts(t *testing.T, n int, vars map[string]string, hostOf func(int) string, body func(c *Comm) error) []string {
	t.Helper()
	dir := t.TempDir()
	all := map[string]string{"FLEXLINK_TRANSPORT": "shm", "FLEXLINK_DEBUG_FILE": filepath.Join(dir, "rank.%r.%h")}
	for k, v := range vars {
		all[k] = v
	}
	errs := worldtest.Run(t, worldtest.Spec{N: n, Env: all, Host: hostOf, CheckClose: true}, New, body)
	logs := make([]string, n)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "rank."+strconv.Itoa(r)+"."+hostOf(r)))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		logs[r] = string(b)
	}
	return logs
}

// fields parses the key=value pairs of the first line of log whose
// message is msg ("flexlink: msg:").
func fields(log, msg string, nth int) map[string]string {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, " flexlink: "+msg+":") {
			continue
		}
		if nth--; nth >= 0 {
			continue
		}
		out := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				if _, dup := out[k]; dup {
					out["duplicate:"+k] = v
				}
				out[k] = v
			}
		}
		return out
	}
	return nil
}

func allreduces(ctx context.Context, c *Comm, counts []int) error {
	for _, n := range counts {
		buf := make(collectives.HostBuffer, 4*n)
		err := c.Run(ctx, "allreduce", func(ctx context.Context) error {
			return c.Engine().AllReduce(ctx, buf, buf, n, dtype.Float32, dtype.Sum)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func TestCollLine(t *testing.T) {
	const n = 3
	// 1020 float32 = 4080 bytes, under the 8 KiB threshold: recursive
	// doubling; 6144 float32 = 24 KiB: ring.
	counts := []int{1020, 6144}
	wantAlgo := []string{collectives.AlgoRD, collectives.AlgoRing}
	base := map[string]string{"FLEXLINK_ALGO_THRESHOLD": "8192"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	body := func(c *Comm) error { return allreduces(context.Background(), c, counts) }

	t.Run("coll", func(t *testing.T) {
		logs := runLogged(t, n, with("FLEXLINK_DEBUG", "INFO", "FLEXLINK_DEBUG_SUBSYS", "INIT,COLL"), body)
		for r, log := range logs {
			for i, count := range counts {
				f := fields(log, "allreduce", i)
				if f == nil {
					t.Fatalf("rank %d: no allreduce line %d in\n%s", r, i, log)
				}
				want := map[string]string{"rank": strconv.Itoa(r), "host": "testhost", "comm": "w",
					"opCount": strconv.Itoa(i + 1), "count": strconv.Itoa(count), "datatype": dtype.Float32.String(),
					"bytes": strconv.Itoa(4 * count), "op": "sum", "nranks": strconv.Itoa(n), "algo": wantAlgo[i]}
				for k, v := range want {
					if f[k] != v {
						t.Errorf("rank %d call %d: %s=%q, want %q (line %v)", r, i, k, f[k], v, f)
					}
				}
				if !strings.HasPrefix(f["links"], "shm:") && f["links"] != "none" {
					t.Errorf("rank %d call %d: links=%q, want shm:N", r, i, f["links"])
				}
				for k := range f {
					if strings.HasPrefix(k, "duplicate:") {
						t.Errorf("rank %d: key %s twice in %v", r, k, f)
					}
				}
			}
			if fields(log, "allreduce done", 0) != nil {
				t.Errorf("rank %d: end-of-call line at INFO:\n%s", r, log)
			}
		}
	})
	t.Run("no coll", func(t *testing.T) {
		for _, v := range []map[string]string{with("FLEXLINK_DEBUG", "INFO"), with("FLEXLINK_DEBUG", "DEBUG", "FLEXLINK_DEBUG_SUBSYS", "^COLL"), with("FLEXLINK_DEBUG", "WARN", "FLEXLINK_DEBUG_SUBSYS", "COLL")} {
			for r, log := range runLogged(t, n, v, body) {
				if strings.Contains(log, "allreduce") {
					t.Errorf("%v: rank %d logged a call:\n%s", v, r, log)
				}
			}
		}
	})
	t.Run("trace", func(t *testing.T) {
		logs := runLogged(t, n, with("FLEXLINK_DEBUG", "TRACE"), body)
		t.Logf("rank 0 at TRACE:\n%s", logs[0])
		for r, log := range logs {
			for i := range counts {
				start, end := fields(log, "allreduce", i), fields(log, "allreduce done", i)
				if start == nil || end == nil {
					t.Fatalf("rank %d call %d: want a start and an end line at TRACE in\n%s", r, i, log)
				}
				if end["opCount"] != start["opCount"] || end["algo"] != start["algo"] {
					t.Errorf("rank %d: end line %v does not match start %v", r, end, start)
				}
				if us, err := strconv.ParseFloat(end["elapsed_us"], 64); err != nil || us <= 0 {
					t.Errorf("rank %d: elapsed_us=%q", r, end["elapsed_us"])
				}
			}
		}
	})
}

// TestCallObserverOff: with the per-call lines off the engine gets no
// observer, and with COLL on a send/recv group (P2P off) costs no
// allocation.
func TestCallObserverOff(t *testing.T) {
	for _, tc := range []struct {
		level hclog.Level
		mask  flog.Subsys
		on    bool
	}{
		{hclog.Warn, flog.All, false},
		{hclog.Info, flog.Default, false},
		{hclog.Debug, flog.All &^ (flog.Coll | flog.P2P), false},
		{hclog.Info, flog.Coll, true},
		{hclog.Info, flog.P2P, true},
	} {
		lg := flog.New(&hclog.LoggerOptions{Level: tc.level, Output: new(strings.Builder)}, tc.mask)
		c := &Comm{world: &world{log: lg}, name: "w"}
		if got := c.callObserver() != nil; got != tc.on {
			t.Errorf("level %s subsys %s: observer installed %v, want %v", tc.level, tc.mask, got, tc.on)
		}
	}
	lg := flog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: new(strings.Builder)}, flog.Coll)
	obs := (&Comm{world: &world{log: lg}, name: "w"}).callObserver()
	call := collectives.Call{Op: collectives.OpSendRecv, CallArgs: collectives.CallArgs{Peers: 2, Root: -1}}
	if a := testing.AllocsPerRun(100, func() { obs(call) }); a != 0 {
		t.Errorf("a send/recv call with P2P off allocates %v times", a)
	}
	call.Op, call.End = "allreduce", true
	if a := testing.AllocsPerRun(100, func() { obs(call) }); a != 0 {
		t.Errorf("the end of a call at INFO allocates %v times", a)
	}
}

// TestSharesLine: ranks on two hosts joined over two rails (loopback and
// the first NIC) log the balancer's shares at INFO by default, a few
// times (when they settle and move), not once per message; with one
// rail (no NIC besides loopback) there is no multi-link channel and no
// such line.
func TestSharesLine(t *testing.T) {
	vars := map[string]string{"FLEXLINK_DEBUG": "INFO", "FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp",
		"FLEXLINK_NET_RAILS": "2", "FLEXLINK_NET_IFNAME": "lo,eth,en", "FLEXLINK_CHUNK_BYTES": "1M"}
	const calls = 20
	multi := make([]bool, 2)
	logs := runLoggedHosts(t, 2, vars, func(r int) string { return "host" + strconv.Itoa(r) }, func(c *Comm) error {
		if err := allreduces(context.Background(), c, slices.Repeat([]int{256 << 10}, calls)); err != nil {
			return err
		}
		for _, l := range c.Links() {
			multi[c.Rank()] = multi[c.Rank()] || l.Kind == "multi"
		}
		return nil
	})
	for r, log := range logs {
		n := strings.Count(log, "balancer shares:")
		if !multi[r] {
			if n != 0 {
				t.Errorf("rank %d: shares logged without a multi-link channel:\n%s", r, log)
			}
			continue
		}
		f := fields(log, "balancer shares", 0)
		if f == nil || f["peer"] != strconv.Itoa(1-r) || f["bytes"] == "" || !strings.Contains(f["shares"], "net0:") {
			t.Errorf("rank %d: want a balancer shares line naming peer %d and net0, got %v in\n%s", r, 1-r, f, log)
		}
		// Every call sends at least 2 messages each way: fewer lines than
		// messages means one per change, not one per message.
		if n >= 2*calls {
			t.Errorf("rank %d: %d shares lines for %d calls", r, n, calls)
		}
		t.Logf("rank %d: %d shares lines; first %v", r, n, f)
	}
}

// TestP2PLine: a send/recv group writes one line when P2P is selected
// (with the number of transfers), none with COLL alone.
func TestP2PLine(t *testing.T) {
	const n = 3
	body := func(c *Comm) error {
		r := c.Rank()
		out, in := make(collectives.HostBuffer, 64), make(collectives.HostBuffer, 64)
		return c.Run(context.Background(), "group", func(ctx context.Context) error {
			return c.Engine().Group(ctx, []collectives.P2P{
				{Send: true, Peer: (r + 1) % n, Buf: out},
				{Peer: (r + n - 1) % n, Buf: in},
			})
		})
	}
	for _, tc := range []struct {
		subsys string
		want   bool
	}{{"P2P", true}, {"COLL", false}} {
		logs := runLogged(t, n, map[string]string{"FLEXLINK_DEBUG": "INFO", "FLEXLINK_DEBUG_SUBSYS": tc.subsys}, body)
		for r, log := range logs {
			f := fields(log, collectives.OpSendRecv, 0)
			if (f != nil) != tc.want {
				t.Fatalf("subsys %s rank %d: line %v, want one: %v\n%s", tc.subsys, r, f, tc.want, log)
			}
			if tc.want && (f["transfers"] != "2" || f["nranks"] != strconv.Itoa(n) || f["algo"] != "direct") {
				t.Errorf("rank %d: %v, want transfers=2 nranks=%d algo=direct", r, f, n)
			}
		}
	}
}
