package cu

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/errs"
)

// TestLoadMissingLibrary: a library that does not exist fails with
// ErrNotSupported and dlopen's own message.
func TestLoadMissingLibrary(t *testing.T) {
	const path = "libflexlink-no-such-driver.so.1"
	_, err := Load(path)
	if !errors.Is(err, errs.ErrNotSupported) {
		t.Fatalf("Load(%q) = %v, want an error wrapping ErrNotSupported", path, err)
	}
	for _, want := range []string{"no libcuda: ", path, "cannot open shared object file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Load error %q lacks %q", err, want)
		}
	}
}

func TestErrorText(t *testing.T) {
	for _, tc := range []struct {
		err          *Error
		text         string
		notSupported bool
	}{
		{&Error{Func: "cuMemAlloc", Code: ErrorOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"},
			"cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory", false},
		{&Error{Func: "cuInit", Code: ErrorNoDevice, Name: "CUDA_ERROR_NO_DEVICE", Desc: "no CUDA-capable device is detected"},
			"cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", true},
		{&Error{Func: "cuModuleLoadData", Code: ErrorUnsupportedPTX, Name: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", Desc: "x"},
			"cuModuleLoadData: CUDA_ERROR_UNSUPPORTED_PTX_VERSION: x", true},
		{&Error{Func: "cuCtxEnablePeerAccess", Code: ErrorPeerAlreadyEnabled, Name: "N", Desc: "d"},
			"cuCtxEnablePeerAccess: N: d", false},
	} {
		if got := tc.err.Error(); got != tc.text {
			t.Errorf("Error() = %q, want %q", got, tc.text)
		}
		wrapped := fmt.Errorf("gpu 0: %w", tc.err)
		if got := errors.Is(wrapped, errs.ErrNotSupported); got != tc.notSupported {
			t.Errorf("%s: errors.Is(ErrNotSupported) = %v, want %v", tc.text, got, tc.notSupported)
		}
		if !Is(wrapped, tc.err.Code) || Is(wrapped, tc.err.Code+1) || Is(errors.New("x"), tc.err.Code) {
			t.Errorf("%s: Is does not match exactly its code", tc.text)
		}
	}
}

func TestBaseName(t *testing.T) {
	for in, want := range map[string]string{
		"cuMemAlloc_v2":         "cuMemAlloc",
		"cuIpcOpenMemHandle_v2": "cuIpcOpenMemHandle",
		"cuInit":                "cuInit",
		"cuEventElapsedTime_v2": "cuEventElapsedTime",
	} {
		if got := baseName(in); got != want {
			t.Errorf("baseName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSymbolTable: every entry point has a name to resolve, and the
// versioned ones that cuda.h maps are asked for by their versioned name.
func TestSymbolTable(t *testing.T) {
	seen := map[string]bool{}
	for s, cands := range symbols() {
		if len(cands) == 0 {
			t.Fatalf("symbol %d has no name", s)
		}
		for _, c := range cands {
			if seen[c] || !strings.HasPrefix(c, "cu") {
				t.Errorf("symbol name %q repeated or malformed", c)
			}
			seen[c] = true
		}
	}
	for _, v := range []string{"cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuMemHostRegister_v2",
		"cuIpcOpenMemHandle_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuStreamDestroy_v2",
		"cuEventDestroy_v2", "cuDevicePrimaryCtxRelease_v2", "cuDeviceTotalMem_v2", "cuMemHostGetDevicePointer_v2"} {
		if !seen[v] {
			t.Errorf("%s is not resolved", v)
		}
	}
}

func TestCString(t *testing.T) {
	buf := []byte("NVIDIA H200\x00garbage")
	if got := cString(buf); got != "NVIDIA H200" {
		t.Errorf("cString = %q", got)
	}
	if got := goString(&buf[0], 64); got != "NVIDIA H200" {
		t.Errorf("goString = %q", got)
	}
	if got := goString(&buf[0], 6); got != "NVIDIA" {
		t.Errorf("goString with max 6 = %q", got)
	}
}

// TestCheckSuccessAllocatesNothing: every driver call's result goes
// through check, so a success must cost nothing (building the symbol
// table there once took half of a one-rank call's host time on an H200).
func TestCheckSuccessAllocatesNothing(t *testing.T) {
	var l Lib
	if n := testing.AllocsPerRun(100, func() {
		if err := l.check(sLaunchKernel, Success); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("check of a success allocates %v times, want 0", n)
	}
}
