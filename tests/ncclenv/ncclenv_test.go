// Package ncclenv checks, with real processes, that a job's NCCL_*
// environment has the effect docs/SETTINGS.md's NCCL table promises: the
// interface chosen, the transport between ranks of one host, the INFO
// line for a variable flexlink does not honour, and a bad value stopping
// flexrun before any rank starts.
package ncclenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

var bin string

func TestMain(m *testing.M) {
	testenv.RunWithBinaries(m, "flexlink-ncclenv", func(dir string) { bin = dir },
		"github.com/flexlink/flexlink/cmd/flexrun", "github.com/flexlink/flexlink/cmd/flexinfo", "github.com/flexlink/flexlink/examples/train")
}

// run runs a built program with env added to a clean copy of this
// process's environment (no NCCL_ or FLEXLINK_ variable of the caller's).
func run(t *testing.T, env []string, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NCCL_") && !strings.HasPrefix(kv, "FLEXLINK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %v: did not end within 90 s\n%s", name, args, out)
	}
	return string(out), code
}

var railNIC = regexp.MustCompile(`(?m)^\d+\s+(\S+)\s`)

// NCCL_SOCKET_IFNAME picks the NIC the network transport uses, as
// FLEXLINK_SOCKET_IFNAME does, and the FLEXLINK name wins over it.
func TestSocketIfnameChoosesInterface(t *testing.T) {
	nics := func(env ...string) []string {
		out, code := run(t, env, "flexinfo", "net")
		if code != 0 {
			t.Fatalf("flexinfo net (%v): exit %d\n%s", env, code, out)
		}
		var names []string
		for _, m := range railNIC.FindAllStringSubmatch(out, -1) {
			names = append(names, m[1])
		}
		return names
	}
	if got := nics("NCCL_SOCKET_IFNAME==lo"); len(got) != 1 || got[0] != "lo" {
		t.Errorf("NCCL_SOCKET_IFNAME==lo: rails %q, want [lo]", got)
	}
	if got, want := nics("NCCL_SOCKET_IFNAME==lo"), nics("FLEXLINK_SOCKET_IFNAME==lo"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("NCCL_SOCKET_IFNAME==lo gives %q, FLEXLINK_SOCKET_IFNAME==lo %q: want the same", got, want)
	}
	def := nics()
	if len(def) == 0 || def[0] == "lo" {
		testenv.Missing(t, "a network interface other than lo", fmt.Sprintf("the default choice is %q: the FLEXLINK name cannot be seen to win over NCCL's", def))
	}
	if got := nics("NCCL_SOCKET_IFNAME==lo", "FLEXLINK_SOCKET_IFNAME=="+def[0]); len(got) != 1 || got[0] != def[0] {
		t.Errorf("NCCL_SOCKET_IFNAME==lo FLEXLINK_SOCKET_IFNAME==%s: rails %q, want [%s] (the FLEXLINK name wins)", def[0], got, def[0])
	}
}

var linkKind = regexp.MustCompile(`link up: .* kind=(\S+)`)

// NCCL_SHM_DISABLE=1 takes shared memory away from ranks on one host:
// their link is the network transport's; without it, shm.
func TestShmDisableUsesNetwork(t *testing.T) {
	kinds := func(env ...string) map[string]int {
		out, code := run(t, append(env, "FLEXLINK_DEBUG=INFO"), "flexrun", "-np", "2", "--oversubscribe", filepath.Join(bin, "train"), "-epochs", "1")
		if code != 0 || !strings.Contains(out, "weights identical on all 2 ranks") {
			t.Fatalf("flexrun (%v): exit %d\n%s", env, code, out)
		}
		k := map[string]int{}
		for _, m := range linkKind.FindAllStringSubmatch(out, -1) {
			k[m[1]]++
		}
		return k
	}
	if k := kinds(); k["shm"] != 2 || len(k) != 1 {
		t.Errorf("defaults: link kinds %v, want shm on both ranks", k)
	}
	// net: one NIC; multi: a channel over several NICs (rails) of the
	// network transport.
	if k := kinds("NCCL_SHM_DISABLE=1"); k["net"]+k["multi"] != 2 || k["shm"] != 0 {
		t.Errorf("NCCL_SHM_DISABLE=1: link kinds %v, want the network transport's (net or multi) on both ranks", k)
	}
	if k := kinds("NCCL_SHM_DISABLE=1", "FLEXLINK_TRANSPORT=shm"); k["shm"] != 2 || len(k) != 1 {
		t.Errorf("NCCL_SHM_DISABLE=1 FLEXLINK_TRANSPORT=shm: link kinds %v, want shm (the FLEXLINK name wins)", k)
	}
}

// A variable flexlink does not honour gets exactly one INFO line in the
// job (rank 0's), naming it; a mapped one gets none.
func TestUnmappedVariableInfoLine(t *testing.T) {
	out, code := run(t, []string{"FLEXLINK_DEBUG=INFO", "NCCL_ALGO=Tree", "NCCL_SOCKET_NTHREADS=2"},
		"flexrun", "-np", "3", "--oversubscribe", filepath.Join(bin, "train"), "-epochs", "1")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if n := strings.Count(out, "NCCL_ALGO has no effect on flexlink"); n != 1 {
		t.Errorf("%d lines say NCCL_ALGO has no effect, want 1:\n%s", n, out)
	}
	if strings.Contains(out, "NCCL_SOCKET_NTHREADS has no effect") {
		t.Errorf("mapped NCCL_SOCKET_NTHREADS reported as having no effect:\n%s", out)
	}
}

// A bad value of a mapped variable stops flexrun before any rank starts,
// exit 1, naming the variable and its value.
func TestBadValueStopsFlexrun(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	out, code := run(t, []string{"NCCL_P2P_DISABLE=yes"}, "flexrun", "-np", "2", "--oversubscribe", "sh", "-c", "touch "+marker)
	if code != 1 || !strings.Contains(out, `NCCL_P2P_DISABLE="yes"`) {
		t.Errorf("exit %d, output:\n%s\nwant exit 1 naming NCCL_P2P_DISABLE=\"yes\"", code, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a rank started despite the bad value")
	}
}
