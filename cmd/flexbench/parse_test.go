package main

// End-to-end tests of flexbench under flexrun (two real ranks), checked
// against what nccl-tests prints, and a unit test of the result check.

import (
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

// parseTable reads the table's data rows (lines not starting with #).
func parseTable(out string) ([]benchRow, error) {
	var rows []benchRow
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 13 {
			return nil, fmt.Errorf("table row %q has %d columns, want 13", line, len(f))
		}
		r, err := rowFromStrings(f)
		r.precTime, r.precBW, r.source = 0.05, 0.005, "table"
		if err != nil {
			return nil, fmt.Errorf("table row %q: %w", line, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

var csvHeader = []string{"size", "count", "type", "redop", "root", "out_time_us", "out_algbw", "out_busbw", "out_wrong",
	"in_time_us", "in_algbw", "in_busbw", "in_wrong"}

func parseCSV(out string) ([]benchRow, error) {
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || strings.Join(recs[0], ",") != strings.Join(csvHeader, ",") {
		return nil, fmt.Errorf("csv header %q, want %q", recs, csvHeader)
	}
	var rows []benchRow
	for _, rec := range recs[1:] {
		r, err := rowFromStrings(rec)
		r.precTime, r.precBW, r.source = 0.0005, 0.0005, "csv"
		if err != nil {
			return nil, fmt.Errorf("csv record %q: %w", rec, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// rowFromStrings reads the 13 columns in table/CSV order.
func rowFromStrings(f []string) (benchRow, error) {
	var r benchRow
	var errs []error
	i := func(s string) int64 { v, err := strconv.ParseInt(s, 10, 64); errs = append(errs, err); return v }
	x := func(s string) float64 { v, err := strconv.ParseFloat(s, 64); errs = append(errs, err); return v }
	r.size, r.count, r.typ, r.redop, r.root = i(f[0]), i(f[1]), f[2], f[3], i(f[4])
	r.outTime, r.outAlg, r.outBus, r.outWrong = x(f[5]), x(f[6]), x(f[7]), i(f[8])
	r.inTime, r.inAlg, r.inBus, r.inWrong = x(f[9]), x(f[10]), x(f[11]), i(f[12])
	return r, errors.Join(errs...)
}

// parseJSON reads the JSON array by key names (not through flexbench's
// own struct), so a renamed or missing key shows.
func parseJSON(out string) ([]benchRow, error) {
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var recs []map[string]any
	if err := dec.Decode(&recs); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON array: %v", err)
	}
	var rows []benchRow
	for _, m := range recs {
		var errs []error
		num := func(k string) json.Number {
			v, ok := m[k].(json.Number)
			if !ok {
				errs = append(errs, fmt.Errorf("key %q: %v is not a number", k, m[k]))
			}
			return v
		}
		i := func(k string) int64 { v, err := num(k).Int64(); errs = append(errs, err); return v }
		x := func(k string) float64 { v, err := num(k).Float64(); errs = append(errs, err); return v }
		s := func(k string) string {
			v, ok := m[k].(string)
			if !ok {
				errs = append(errs, fmt.Errorf("key %q: %v is not a string", k, m[k]))
			}
			return v
		}
		r := benchRow{size: i("size"), count: i("count"), typ: s("type"), redop: s("redop"), root: i("root"),
			outTime: x("out_time_us"), outAlg: x("out_algbw_gbs"), outBus: x("out_busbw_gbs"), outWrong: i("out_wrong"),
			inTime: x("in_time_us"), inAlg: x("in_algbw_gbs"), inBus: x("in_busbw_gbs"), inWrong: i("in_wrong"),
			source: "json"}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("json record %v: %w", m, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// checkRows compares rows with the expected ones: identical non-timing
// columns, no wrong elements, algbw = size/time and busbw = algbw × the
// nccl-tests factor up to the printed precision.
func checkRows(t *testing.T, got, want []benchRow, factor float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d (sizes %v)", len(got), len(want), want)
	}
	for i, g := range got {
		w := want[i]
		if g.size != w.size || g.count != w.count || g.typ != w.typ || g.redop != w.redop || g.root != w.root {
			t.Errorf("%s row %d: size %d count %d type %s redop %s root %d; want %d %d %s %s %d%s",
				g.source, i, g.size, g.count, g.typ, g.redop, g.root, w.size, w.count, w.typ, w.redop, w.root, countHint(g, w))
		}
		if g.outWrong != 0 || g.inWrong != 0 {
			t.Errorf("%s row %d (size %d): #wrong %d out of place, %d in place", g.source, i, g.size, g.outWrong, g.inWrong)
		}
		checkBW(t, g, "out of place", g.outTime, g.outAlg, g.outBus, factor)
		checkBW(t, g, "in place", g.inTime, g.inAlg, g.inBus, factor)
	}
}

// countHint explains the most likely count mismatch.
func countHint(g, w benchRow) string {
	if g.size == w.size && g.count > w.count {
		return " (nccl-tests prints the per-rank block count, its paramcount, for allgather, reducescatter and alltoall)"
	}
	return ""
}

func checkBW(t *testing.T, r benchRow, what string, us, alg, bus, factor float64) {
	t.Helper()
	const rel = 1e-9
	if us <= r.precTime {
		t.Errorf("%s size %d %s: time %v", r.source, r.size, what, us)
		return
	}
	gb := float64(r.size) / 1e3 // GB/s × µs
	lo, hi := gb/(us+r.precTime)-r.precBW, gb/(us-r.precTime)+r.precBW
	if alg < lo-rel*alg || alg > hi+rel*alg {
		t.Errorf("%s size %d %s: algbw %v with time %v µs, want size/time in [%v, %v]", r.source, r.size, what, alg, us, lo, hi)
	}
	if d := math.Abs(bus - alg*factor); d > r.precBW*(1+factor)+rel*bus {
		t.Errorf("%s size %d %s: busbw %v, want algbw %v × %v", r.source, r.size, what, bus, alg, factor)
	}
}

// TestCollectives runs every collective with four dtype/op pairs on two
// ranks and checks the nccl-tests table it prints.
func TestCollectives(t *testing.T) {
	for _, c := range benchColls {
		for _, ty := range benchTypes {
			t.Run(c.name+"/"+ty.dtype+"/"+ty.op, func(t *testing.T) {
				out := flexrunBench(t, 2, c.name, "-b", "1K", "-e", "64K", "-f", "4", "-n", "2", "-w", "1", "-d", ty.dtype, "-o", ty.op)
				if out.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", out.code, out.stderr)
				}
				rows, err := parseTable(out.stdout)
				if err != nil {
					t.Fatal(err)
				}
				checkRows(t, rows, wantRows(c, ty.dtype, ty.size, 1<<10, 64<<10, 4, 2, ty.op), c.factor(2))
				if !strings.Contains(out.stdout, "\n# Out of bounds values : 0 OK\n") {
					t.Errorf("no clean footer:\n%s", out.stdout)
				}
			})
		}
	}
}

// TestFormats checks that --csv and --json carry the same rows as the
// table, for every collective (dtype/op pairs rotate).
func TestFormats(t *testing.T) {
	for i, c := range benchColls {
		for j, format := range []struct {
			flag  string
			parse func(string) ([]benchRow, error)
		}{{"--csv", parseCSV}, {"--json", parseJSON}} {
			ty := benchTypes[(i+j)%len(benchTypes)]
			t.Run(c.name+format.flag, func(t *testing.T) {
				out := flexrunBench(t, 2, c.name, "-b", "1K", "-e", "64K", "-f", "4", "-n", "2", "-w", "1", "-d", ty.dtype, "-o", ty.op, format.flag)
				if out.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", out.code, out.stderr)
				}
				rows, err := format.parse(out.stdout)
				if err != nil {
					t.Fatalf("%v; output:\n%s", err, out.stdout)
				}
				checkRows(t, rows, wantRows(c, ty.dtype, ty.size, 1<<10, 64<<10, 4, 2, ty.op), c.factor(2))
			})
		}
	}
}

// TestRounding uses sizes that are not whole blocks on three ranks.
func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		coll, dtype string
		tsize, size int64
	}{
		{"allreduce", "float", 4, 1001},
		{"allgather", "double", 8, 1000},
		{"reducescatter", "float", 4, 1000},
		{"alltoall", "int8", 1, 1000},
	} {
		t.Run(tc.coll, func(t *testing.T) {
			c := collByName(t, tc.coll)
			sz := strconv.FormatInt(tc.size, 10)
			out := flexrunBench(t, 3, tc.coll, "-b", sz, "-e", sz, "-n", "1", "-w", "0", "-d", tc.dtype, "--json")
			if out.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", out.code, out.stderr)
			}
			rows, err := parseJSON(out.stdout)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, rows, wantRows(c, tc.dtype, tc.tsize, tc.size, tc.size, 2, 3, "sum"), c.factor(3))
		})
	}
}

// TestPlot checks that --plot writes a valid SVG and a decodable PNG.
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		coll, file string
		valid      func(f *os.File) error
	}{
		{"allreduce", "busbw.svg", func(f *os.File) error {
			dec := xml.NewDecoder(f)
			var root string
			for {
				tok, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				if se, ok := tok.(xml.StartElement); ok && root == "" {
					root = se.Name.Local
				}
			}
			if root != "svg" {
				return fmt.Errorf("root element %q, want svg", root)
			}
			return nil
		}},
		{"alltoall", "busbw.png", func(f *os.File) error {
			img, err := png.Decode(f)
			if err != nil {
				return err
			}
			b := img.Bounds()
			colors := map[[4]uint32]bool{}
			for y := b.Min.Y; y < b.Max.Y; y += 3 {
				for x := b.Min.X; x < b.Max.X; x += 3 {
					r, g, bl, a := img.At(x, y).RGBA()
					colors[[4]uint32{r, g, bl, a}] = true
				}
			}
			if b.Dx() < 100 || b.Dy() < 100 || len(colors) < 2 {
				return fmt.Errorf("%v image with %d colours: nothing drawn", b, len(colors))
			}
			return nil
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			out := flexrunBench(t, 2, tc.coll, "-b", "1K", "-e", "64K", "-f", "4", "-n", "1", "-w", "0", "--plot", path)
			if out.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", out.code, out.stderr)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := tc.valid(f); err != nil {
				t.Errorf("%s: %v", tc.file, err)
			}
		})
	}
}

// TestBadArguments checks that mistakes end the job with a non-zero status
// and a message naming what was wrong.
func TestBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"allreduce", "-d", "float17"}, `unknown dtype "float17"`},
		{[]string{"allreduce", "-o", "median"}, `unknown op "median"`},
		{[]string{"allscatter", "-b", "1K"}, "allscatter"},
		{[]string{"allreduce", "-b", "12Q"}, `bad size "12Q"`},
		{[]string{"broadcast", "-b", "1K", "-e", "1K", "-r", "5"}, "root 5 out of range"},
		{[]string{"allreduce", "--device", "tpu"}, "tpu"},
		{[]string{"allreduce", "stray"}, "stray"},
		{[]string{"allreduce", "-b", "1G", "-e", "1K"}, "-b 1073741824 is larger than -e 1024: no size to measure"},
		{[]string{"allreduce", "-f", "0.5"}, "-f 0.5: want a step factor of 1 or more"},
		{[]string{"allreduce", "-f", "1"}, "-f 1 with -i 0: the size would never grow"},
		{[]string{"broadcast", "-r", "-1"}, "-r -1: want a root rank of 0 or more"},
		{[]string{"allreduce", "-n", "0"}, "-n 0: want 1 or more timed iterations"},
		{[]string{"allreduce", "-w", "-1"}, "-w -1: want 0 or more warm-up iterations"},
		{[]string{"allreduce", "-c", "2"}, "-c 2: want 0 or 1"},
		{[]string{"allreduce", "-e", "-5"}, `-e: bad size "-5"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := flexrunBench(t, 2, tc.args...)
			if out.code == 0 {
				t.Errorf("exit status 0; stdout:\n%s", out.stdout)
			}
			if !strings.Contains(out.stderr, tc.want) {
				t.Errorf("stderr does not name the problem (%s):\n%s", tc.want, out.stderr)
			}
		})
	}
}

// TestAllReduceMemory checks the peak resident set of a 64 MiB float
// allreduce out of place: at most twice the user's buffers (send and recv,
// 128 MiB) plus 64 MiB on every rank.
func TestAllReduceMemory(t *testing.T) {
	const user = 2 * 64 << 20
	out := flexrunBench(t, 2, "allreduce", "-b", "64M", "-e", "64M", "-n", "3", "-w", "1", "--no-inplace")
	if out.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", out.code, out.stderr)
	}
	rows, err := parseTable(out.stdout)
	if err != nil || len(rows) != 1 || rows[0].outWrong != 0 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	if out.maxRSS == 0 || out.maxRSS > 2*user+64<<20 {
		t.Errorf("peak RSS of a rank %d MiB, want at most %d MiB", out.maxRSS>>20, (2*user+64<<20)>>20)
	}
	t.Logf("peak RSS of a rank: %d MiB", out.maxRSS>>20)
}

// simulate computes, from the collective's definition, what rank me's recv
// holds after coll on n ranks whose send element i is in(r, i); blk is the
// per-rank block. sig[i] is false where recv is not significant (reduce on
// a non-root). It also returns the send count.
func simulate(coll string, dt dtype.DType, op dtype.Op, in func(r, i int) float64, blk, n, me, root int) (want []float64, sig []bool, send int) {
	red := func(i int) float64 { return dtype.Fold(op, dt, n, func(r int) float64 { return in(r, i) }) }
	send, recv := blk*n, blk*n
	switch coll {
	case "allgather":
		send = blk
	case "reducescatter":
		recv = blk
	}
	for i := range recv {
		v, ok := 0.0, true
		switch coll {
		case "allreduce":
			v = red(i)
		case "reduce":
			v, ok = red(i), me == root
		case "broadcast":
			v = in(root, i)
		case "sendrecv":
			v = in((me+n-1)%n, i)
		case "allgather":
			v = in(i/blk, i%blk)
		case "alltoall":
			v = in(i/blk, me*blk+i%blk)
		case "reducescatter":
			v = red(me*blk + i)
		default:
			panic(coll)
		}
		want, sig = append(want, v), append(sig, ok)
	}
	return want, sig, send
}

// TestVerifyCountsWrong checks flexbench's result check (#wrong) against
// results built from each collective's definition: zero on a correct
// buffer, and exactly the damaged significant elements on a corrupted one.
func TestVerifyCountsWrong(t *testing.T) {
	for name, spec := range ops() {
		for _, dt := range dtype.All() {
			for _, op := range dtype.Ops() {
				for _, n := range []int{1, 2, 3, 5} {
					for me := range n {
						const blk = 7
						root := (me + 1) % n
						in := func(r, i int) float64 { // as fill stores it
							b := make([]byte, dt.Size())
							dtype.Put(b, 0, dt, spec.input(r, i, n, op))
							return dtype.Get(b, 0, dt)
						}
						want, sig, sc := simulate(name, dt, op, in, blk, n, me, root)
						if gsc, grc := spec.counts(spec.round(blk*n, n), n); gsc != sc || grc != len(want) {
							t.Errorf("%s n=%d: counts %d, %d; want send %d, recv %d", name, n, gsc, grc, sc, len(want))
							continue
						}
						recv := make([]byte, len(want)*dt.Size())
						for i, v := range want {
							dtype.Put(recv, i, dt, v)
						}
						cfg := config{spec: spec, dt: dt, op: op, root: root}
						if got := verify(rank.Bytes(recv, dt), cfg, me, n, sc); got != 0 {
							t.Errorf("%s %s %s n=%d rank %d: %d wrong in a correct result", name, dt, op, n, me, got)
						}
						bad := int64(0) // len(want) >= 7: three distinct elements
						for _, i := range []int{0, len(want) / 2, len(want) - 1} {
							v := dtype.Get(recv, i, dt)
							if dt.IsFloat8() { // +3 can sit within float8's tolerance: flip the sign and grow
								v = -math.Copysign(math.Abs(v)+16, v)
							} else {
								v += 3
							}
							dtype.Put(recv, i, dt, v)
							if sig[i] {
								bad++
							}
						}
						if got := verify(rank.Bytes(recv, dt), cfg, me, n, sc); got != bad {
							t.Errorf("%s %s %s n=%d rank %d: %d wrong, want the %d corrupted", name, dt, op, n, me, got, bad)
						}
					}
				}
			}
		}
	}
}
