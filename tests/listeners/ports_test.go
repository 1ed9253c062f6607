package listeners

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/ports"
)

// TestPortRangeJob runs the 4-rank job of TestForeignConnections (two
// emulated hosts, tcp on loopback across them, shm within, PXN on) with
// flexrun --port-range, and checks in /proc, once every rank has run a
// checked round (every listener open), that every TCP listener of flexrun
// and of each rank (bootstrap, netlink, PXN proxy) is on a port of the
// range; the job then finishes with #wrong 0.
func TestPortRangeJob(t *testing.T) {
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/flexlink/flexlink/cmd/flexrun",
		"github.com/flexlink/flexlink/tests/listeners/testdata/job").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	r := ports.Range{First: 31100, Last: 31139}
	release := filepath.Join(t.TempDir(), "go")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 4
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "flexrun"), "--oversubscribe", "-np", fmt.Sprint(n), "--timeout", "2m",
		"--port-range", r.String(), filepath.Join(bin, "job"), "-go", release, "-wait", "90s", "-iters", "1")
	cmd.Env = append(os.Environ(), "FLEXLINK_PXN=0", "FLEXLINK_NET=tcp", "FLEXLINK_NET_IFNAME=lo", "FLEXLINK_DEBUG=WARN")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	owners := map[int]string{cmd.Process.Pid: "flexrun"}
	sc := bufio.NewScanner(stdout)
	ready := regexp.MustCompile(`^ready rank (\d+) pid (\d+)$`)
	var out []string
	for len(owners) < n+1 && sc.Scan() {
		out = append(out, sc.Text())
		if m := ready.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ := strconv.Atoi(m[2])
			owners[pid] = "rank " + m[1]
		}
	}
	if len(owners) < n+1 {
		t.Fatalf("the job ended before every rank was ready:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
	}

	ls, err := listeners(owners)
	if err != nil {
		t.Fatal(err)
	}
	checkInventory(t, ls, owners)
	tcpListeners := 0
	for _, l := range ls {
		if l.net != "tcp" {
			continue
		}
		tcpListeners++
		_, p, err := net.SplitHostPort(l.addr)
		port, _ := strconv.Atoi(p)
		if err != nil || !r.Contains(port) {
			t.Errorf("%s: not on a port of --port-range %v", l, r)
		}
	}
	t.Logf("%d TCP listeners, every one in %v", tcpListeners, r)

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("job: %v\n%s\n%s", err, strings.Join(out, "\n"), stderr.String())
	}
	wrong := regexp.MustCompile(`^#wrong (\d+) rank (\d+)$`)
	ranks := 0
	for _, l := range out {
		if m := wrong.FindStringSubmatch(l); m != nil {
			ranks++
			if m[1] != "0" {
				t.Errorf("rank %s: #wrong %s", m[2], m[1])
			}
		}
	}
	if ranks != n {
		t.Errorf("%d ranks reported #wrong, want %d:\n%s", ranks, n, strings.Join(out, "\n"))
	}
}
