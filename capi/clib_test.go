package capi

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// torchSymbols are the nccl* symbols torch 2.11's libtorch_cuda.so needs
// (nm -D --undefined-only on the GPU machine), plus the three nccl-tests
// uses beyond them. The library must export every one.
var torchSymbols = strings.Fields(`ncclAllGather ncclAllReduce ncclAlltoAll ncclBcast ncclBroadcast
ncclCommAbort ncclCommCount ncclCommDeregister ncclCommDestroy ncclCommFinalize
ncclCommGetAsyncError ncclCommInitAll ncclCommInitRank ncclCommInitRankConfig
ncclCommInitRankScalable ncclCommRegister ncclCommShrink ncclCommSplit ncclCommUserRank
ncclCommWindowDeregister ncclCommWindowRegister ncclDevCommCreate ncclDevCommDestroy
ncclGetErrorString ncclGetLastError ncclGetUniqueId ncclGetVersion ncclGroupEnd
ncclGroupSimulateEnd ncclGroupStart ncclMemAlloc ncclMemFree ncclRecv
ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclReduce ncclReduceScatter ncclSend
ncclCommCuDevice ncclGather ncclScatter`)

// TestCLibrary builds libnccl.so.2 (cmd/libnccl) as make libnccl does,
// checks its exports, then compiles testdata/nccl_check.c with the system
// C compiler against include/nccl.h and runs it as 2 and 4 ranks under
// flexrun, on host buffers (this machine has no GPU: the host-buffer
// extension, see the package comment).
func TestCLibrary(t *testing.T) {
	cc := testenv.LookPath(t, "C compiler", "cc")
	nm := testenv.LookPath(t, "binutils", "nm")
	w := newCWorkshop(t)
	ctx, root, dir, run := w.ctx, w.root, w.dir, w.run
	libDir := w.libnccl()
	lib := filepath.Join(libDir, "libnccl.so.2")

	t.Run("exports", func(t *testing.T) {
		var got []string
		sc := bufio.NewScanner(strings.NewReader(run(nm, "-D", "--defined-only", lib)))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 {
				got = append(got, f[2])
			}
		}
		for _, s := range got {
			if !strings.HasPrefix(s, "nccl") && !strings.HasPrefix(s, "pnccl") {
				t.Errorf("exports %s: only nccl*/pnccl* may be exported", s)
			}
		}
		for _, s := range torchSymbols {
			for _, name := range []string{s, "p" + s} {
				if !slices.Contains(got, name) {
					t.Errorf("%s is not exported", name)
				}
			}
		}
		listed, err := os.ReadFile(filepath.Join(root, "cmd/libnccl/symbols.txt"))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if want := strings.Fields(string(listed)); !slices.Equal(got, want) {
			t.Errorf("exports differ from cmd/libnccl/symbols.txt:\n got %v\nwant %v", got, want)
		}
		nccl, err := ncclSymbols(filepath.Join(root, "cmd/libnccl/nccl-2.30.symbols"))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range nccl {
			if _, ok := slices.BinarySearch(got, s); !ok {
				t.Errorf("%s: NCCL 2.30 exports it, flexlink does not", s)
			}
		}
		for _, s := range got {
			if _, ok := slices.BinarySearch(nccl, s); !ok {
				t.Errorf("%s: flexlink exports it, NCCL 2.30 does not", s)
			}
		}
		if soname := run("readelf", "-d", lib); !strings.Contains(soname, "[libnccl.so.2]") {
			t.Errorf("no SONAME libnccl.so.2:\n%s", soname)
		}
	})

	prog := w.program(cc, "nccl_check", libDir, "-lpthread", "-lm")
	flexrun := w.flexrun()

	t.Run("v2.30", func(t *testing.T) {
		v230 := w.program(cc, "nccl_v230", libDir, "-lpthread")
		cmd := exec.CommandContext(ctx, v230)
		cmd.Env = append(os.Environ(), "FLEXLINK_DEBUG=", "FLEXLINK_TIMEOUT=60s")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "nccl_v230: ok") {
			t.Fatalf("nccl_v230: %v\n%s", err, out)
		}
	})

	// The per-call timing program of docs/PERF.md ("C library per-call
	// host cost") builds and gets its one-rank result right (its time is
	// a measurement, not checked here).
	t.Run("percall", func(t *testing.T) {
		percall := w.program(cc, "nccl_percall", libDir)
		cmd := exec.CommandContext(ctx, percall, "2000")
		cmd.Env = append(os.Environ(), "FLEXLINK_DEBUG=")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "result right") {
			t.Fatalf("nccl_percall: %v\n%s", err, out)
		}
	})

	// A program that includes nccl_device.h, as nccl-tests does when
	// nccl.h says NCCL >= 2.28 (src/common.h), must stop at one #error
	// that names the missing device API and the way out.
	t.Run("device header", func(t *testing.T) {
		src := filepath.Join(dir, "uses_device_api.c")
		prog := "#include \"nccl.h\"\n#if NCCL_VERSION_CODE >= NCCL_VERSION(2,28,0)\n#include \"nccl_device.h\"\n#endif\nint main(void) { return 0; }\n"
		if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
			t.Fatal(err)
		}
		// -E: the preprocessing nvcc runs first, which ends the build.
		cmd := exec.CommandContext(ctx, cc, "-E", "-DFLEXLINK_NCCL_NO_CUDA", "-I", filepath.Join(root, "include"), src)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = nil, &stderr
		if err := cmd.Run(); err == nil {
			t.Fatal("a program including nccl_device.h preprocessed without error")
		}
		msg := stderr.String()
		if n := strings.Count(msg, "error:"); n != 1 || !strings.Contains(msg, "no NCCL device API") || !strings.Contains(msg, "LD_PRELOAD") {
			t.Errorf("want one error naming the device API and LD_PRELOAD, got %d:\n%s", n, msg)
		}
	})

	// scripts/nccl-symbols.sh on synthetic torch builds: a library that
	// needs nccl* symbols, in a directory and in a wheel (a zip), against
	// the library built above; the second build needs one NCCL lacks.
	t.Run("nccl-symbols.sh", func(t *testing.T) {
		script := filepath.Join(root, "scripts/nccl-symbols.sh")
		for _, tc := range []struct {
			name    string
			uses    []string
			wantErr bool
			want    string
		}{
			{"served", []string{"ncclAllReduce", "ncclCommRevoke", "ncclParamBind", "pncclSend"}, false, "all 4 nccl symbols are exported"},
			{"one missing", []string{"ncclAllReduce", "ncclCommFlexlinkHasNot"}, true, "ncclCommFlexlinkHasNot"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				torch := filepath.Join(t.TempDir(), "torch")
				if err := os.MkdirAll(filepath.Join(torch, "lib"), 0o755); err != nil {
					t.Fatal(err)
				}
				var c strings.Builder
				for _, u := range tc.uses {
					c.WriteString("extern int " + u + "(void);\n")
				}
				c.WriteString("int use(void) { return 0")
				for _, u := range tc.uses {
					c.WriteString(" + " + u + "()")
				}
				c.WriteString("; }\n")
				src := filepath.Join(t.TempDir(), "torch_cuda.c")
				if err := os.WriteFile(src, []byte(c.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				so := filepath.Join(torch, "lib", "libtorch_cuda.so")
				run(cc, "-shared", "-fPIC", "-o", so, src) // undefined symbols stay undefined in a .so
				whl := filepath.Join(t.TempDir(), "torch-0.0-cp312-cp312-linux_x86_64.whl")
				writeWheel(t, whl, map[string]string{"torch/lib/libtorch_cuda.so": so})
				for _, arg := range []string{torch, whl} {
					out, err := exec.CommandContext(ctx, "bash", script, arg, lib).CombinedOutput()
					if (err != nil) != tc.wantErr || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "libtorch_cuda.so") {
						t.Errorf("nccl-symbols.sh %s: %v, want failure %v and %q:\n%s", filepath.Base(arg), err, tc.wantErr, tc.want, out)
					}
					if tc.wantErr && strings.Contains(string(out), "missing") && strings.Contains(string(out), "  ncclAllReduce") {
						t.Errorf("ncclAllReduce listed as missing:\n%s", out)
					}
				}
			})
		}
	})

	// flexrun --keep-going: rank 2 of 3 dies; ranks 0 and 1 shrink it away.
	t.Run("keep-going shrink", func(t *testing.T) {
		idFile := filepath.Join(t.TempDir(), "id")
		cmd := exec.CommandContext(ctx, flexrun, "-np", "3", "--oversubscribe", "--keep-going", "--timeout", "120s", "--tag-output", prog, idFile, "shrink-after-exit")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("flexrun --keep-going:\n%s", out.String())
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
			t.Errorf("flexrun --keep-going: %v, want exit status 7 (the dead rank's)\n%s", err, out.String())
		}
		for r := range 2 {
			if want := "nccl_check rank " + strconv.Itoa(r) + ": shrunk ok"; !strings.Contains(out.String(), want) {
				t.Errorf("no %q in the output:\n%s", want, out.String())
			}
		}
	})

	for _, n := range []int{2, 4} {
		t.Run("ranks="+strconv.Itoa(n), func(t *testing.T) {
			idFile := filepath.Join(t.TempDir(), "id")
			cmd := exec.CommandContext(ctx, flexrun, "-np", strconv.Itoa(n), "--oversubscribe", "--timeout", "120s", "--tag-output", prog, idFile)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("flexrun -np %d nccl_check: %v\n%s", n, err, out.String())
			}
			for r := range n {
				if want := "nccl_check rank " + strconv.Itoa(r) + ": ok"; !strings.Contains(out.String(), want) {
					t.Errorf("no %q in the output:\n%s", want, out.String())
				}
			}
		})
	}
}

// cWorkshop is what the C-library tests build in: the repository root, a
// temporary directory, and a deadline for every command they run.
type cWorkshop struct {
	t         *testing.T
	ctx       context.Context
	root, dir string
}

func newCWorkshop(t *testing.T) *cWorkshop {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &cWorkshop{t: t, ctx: ctx, root: root, dir: t.TempDir()}
}

// run runs name with args in the root and returns its output; a failure
// fails the test.
func (w *cWorkshop) run(name string, args ...string) string {
	w.t.Helper()
	cmd := exec.CommandContext(w.ctx, name, args...)
	cmd.Dir = w.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// libnccl builds libnccl.so.2 (cmd/libnccl) as make libnccl does, in
// dir/lib, and returns that directory.
func (w *cWorkshop) libnccl() string {
	w.t.Helper()
	libDir := filepath.Join(w.dir, "lib")
	w.run("go", "build", "-tags", "nonvml", "-buildmode=c-shared",
		"-ldflags", "-extldflags '-Wl,-soname,libnccl.so.2 -Wl,--version-script="+filepath.Join(w.root, "cmd/libnccl/exports.map")+"'",
		"-o", filepath.Join(libDir, "libnccl.so.2"), "./cmd/libnccl")
	return libDir
}

// program compiles capi/testdata/name.c with cc against include/nccl.h
// and the libnccl.so.2 in libDir (and libs) into dir/name, its path.
func (w *cWorkshop) program(cc, name, libDir string, libs ...string) string {
	w.t.Helper()
	prog := filepath.Join(w.dir, name)
	w.run(cc, append([]string{"-O1", "-Wall", "-Werror", "-DFLEXLINK_NCCL_NO_CUDA", "-I", filepath.Join(w.root, "include"),
		"-o", prog, filepath.Join(w.root, "capi/testdata/"+name+".c"),
		"-L", libDir, "-l:libnccl.so.2", "-Wl,-rpath," + libDir}, libs...)...)
	return prog
}

// flexrun builds cmd/flexrun into dir and returns its path.
func (w *cWorkshop) flexrun() string {
	w.t.Helper()
	flexrun := filepath.Join(w.dir, "flexrun")
	w.run("go", "build", "-o", flexrun, "./cmd/flexrun")
	return flexrun
}

// ncclSymbols reads a list of NCCL's exported functions (one name a line,
// # comments) and returns the symbols they make, sorted: each name and its
// pnccl* alias, except ncclResetDebugInitInternal, which NCCL exports
// alone.
func ncclSymbols(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var syms []string
	for line := range strings.Lines(string(b)) {
		name := strings.TrimSpace(line)
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		syms = append(syms, name)
		if name != "ncclResetDebugInitInternal" {
			syms = append(syms, "p"+name)
		}
	}
	slices.Sort(syms)
	return syms, nil
}

// writeWheel writes a zip at path holding files (name in the zip → file
// on disk), as pip's wheels are.
func writeWheel(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for name, from := range files {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
