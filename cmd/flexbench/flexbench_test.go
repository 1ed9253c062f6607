package main

// End-to-end tests of flexbench under flexrun (two real ranks), checked
// against what nccl-tests prints, and a unit test of the result check.

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// benchBins are built once by TestMain and only read afterwards.
var benchBins struct{ flexrun, flexbench string }

func TestMain(m *testing.M) {
	testenv.RunWithBinaries(m, "flexbench-test-", func(dir string) {
		benchBins.flexrun, benchBins.flexbench = filepath.Join(dir, "flexrun"), filepath.Join(dir, "flexbench")
	}, "github.com/flexlink/flexlink/cmd/flexrun", "github.com/flexlink/flexlink/cmd/flexbench")
}

// benchOut is one finished flexrun job.
type benchOut struct {
	stdout, stderr string
	code           int
	maxRSS         int64 // bytes: the largest of flexrun and its ranks
}

// flexrunBench runs flexrun -np np --oversubscribe flexbench args... (60 s at most).
func flexrunBench(t *testing.T, np int, args ...string) benchOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{"-np", strconv.Itoa(np), "--oversubscribe", benchBins.flexbench}, args...)
	cmd := exec.CommandContext(ctx, benchBins.flexrun, argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("flexrun %q did not finish in 60 s; stderr:\n%s", argv, errb.String())
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("flexrun %q: %v", argv, err)
	}
	r := benchOut{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
	// wait4 reports the largest resident set of flexrun and of every
	// descendant it reaped (the ranks), in KiB on Linux.
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss << 10
	}
	return r
}

// benchColl is what nccl-tests defines for a collective: whether the count
// column is the per-rank block (its "paramcount": allgather's send count,
// reducescatter's recv count, alltoall's count per peer) with sizes rounded
// down to whole blocks, whether it has a reduction op and a root, and the
// bus-bandwidth factor. (Recent nccl-tests also align reducescatter's
// block to 16 bytes; flexbench rounds to whole blocks only, as earlier
// versions did, and so do these tests.)
type benchColl struct {
	name                     string
	perRank, reduces, rooted bool
	factor                   func(n float64) float64
}

var benchColls = []benchColl{
	{"allreduce", false, true, false, func(n float64) float64 { return 2 * (n - 1) / n }},
	{"allgather", true, false, false, func(n float64) float64 { return (n - 1) / n }},
	{"reducescatter", true, true, false, func(n float64) float64 { return (n - 1) / n }},
	{"broadcast", false, false, true, func(float64) float64 { return 1 }},
	{"reduce", false, true, true, func(float64) float64 { return 1 }},
	{"alltoall", true, false, false, func(n float64) float64 { return (n - 1) / n }},
	{"sendrecv", false, false, false, func(float64) float64 { return 1 }},
}

func collByName(t *testing.T, name string) benchColl {
	for _, c := range benchColls {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no collective %q", name)
	return benchColl{}
}

// benchTypes are the dtype/op pairs every collective runs with.
var benchTypes = []struct {
	dtype, op string
	size      int64
}{{"float", "sum", 4}, {"int8", "max", 1}, {"half", "avg", 2}, {"double", "prod", 8}}

// benchRow is one row of output, whatever the format.
type benchRow struct {
	size, count             int64
	typ, redop              string
	root                    int64
	outTime, outAlg, outBus float64
	inTime, inAlg, inBus    float64
	outWrong, inWrong       int64
	// precTime and precBW are half a unit of the last printed digit of
	// times and bandwidths (0 for JSON's full precision).
	precTime, precBW float64
	source           string
}

// wantRows lists the rows nccl-tests would print (timings aside) for
// sizes min, min*f, ... <= max on n ranks.
func wantRows(c benchColl, dt string, tsize, minB, maxB, f int64, n int, op string) []benchRow {
	var rows []benchRow
	for s := minB; s <= maxB; s *= f {
		w := benchRow{typ: dt, redop: "none", root: -1}
		elems := s / tsize
		if c.perRank {
			w.count = elems / int64(n)
			w.size = w.count * int64(n) * tsize
		} else {
			w.count, w.size = elems, elems*tsize
		}
		if c.reduces {
			w.redop = op
		}
		if c.rooted {
			w.root = 0
		}
		rows = append(rows, w)
	}
	return rows
}
