package nccl

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flexlink/flexlink/internal/errs"
)

func TestOpenMissingLibrary(t *testing.T) {
	const path = "libnccl-flexlink-test-absent.so.2"
	_, dlerr := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if dlerr == nil {
		t.Fatalf("%s exists", path)
	}
	_, err := openPath(path)
	if !errors.Is(err, errs.ErrNotSupported) {
		t.Fatalf("error %v does not wrap ErrNotSupported", err)
	}
	if !strings.Contains(err.Error(), dlerr.Error()) || !strings.HasPrefix(err.Error(), "nccl: no libnccl: ") {
		t.Errorf("error %q lost dlopen's message %q", err, dlerr)
	}
}

// TestOpenNotNCCL loads a library that is not NCCL (the C library, always
// present where purego runs on Linux).
func TestOpenNotNCCL(t *testing.T) {
	_, err := openPath("libc.so.6")
	if !errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), "libc.so.6: no ncclGetVersion") {
		t.Errorf("libc: %v", err)
	}
}

func TestBindOptionalLastError(t *testing.T) {
	table := map[string]uintptr{}
	for _, name := range symbolNames() {
		table[name] = 1 // never called
	}
	lookup := func(name string) (uintptr, error) {
		if p, ok := table[name]; ok {
			return p, nil
		}
		return 0, errors.New("no such symbol")
	}
	delete(table, "ncclGetLastError")
	d, err := bind(lookup)
	if err != nil {
		t.Fatalf("without ncclGetLastError: %v", err)
	}
	if s := d.lastError(0); s != "" {
		t.Errorf("lastError without the symbol = %q", s)
	}
	delete(table, "ncclSend")
	if _, err := bind(lookup); !errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), "ncclSend") {
		t.Errorf("without ncclSend: %v", err)
	}
}

// TestCallingConvention binds dl to Go functions exposed as C function
// pointers (purego callbacks) and checks that what dl passes arrives as the
// C declarations in nccl.h say: ncclUniqueId by value between int
// arguments, eight arguments (two on the stack on amd64) for ncclReduce,
// out-parameters, and C strings returned.
func TestCallingConvention(t *testing.T) {
	var (
		gotID            cUniqueID
		gotN, gotRank    int32
		reduceArgs       []uintptr
		gotErrCode       int32
		gotLastErrorComm uintptr
	)
	desc := []byte("invalid usage from callback\x00")
	last := []byte("detail from callback\x00")
	cbs := map[string]any{
		"ncclGetVersion": func(v *int32) int32 { *v = 22703; return 0 },
		"ncclGetUniqueId": func(id *UniqueID) int32 {
			for i := range id {
				id[i] = byte(255 - i)
			}
			return 0
		},
		"ncclCommInitRank": func(comm *uintptr, n int32, id cUniqueID, rank int32) int32 {
			gotN, gotID, gotRank = n, id, rank
			*comm = 0xabcdef
			return 0
		},
		"ncclReduce": func(send, recv uintptr, count uint64, dt, op, root int32, comm, stream uintptr) int32 {
			reduceArgs = []uintptr{send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(root), comm, stream}
			return int32(InvalidUsage)
		},
		"ncclGetErrorString": func(r int32) uintptr { gotErrCode = r; return uintptr(unsafe.Pointer(&desc[0])) },
		"ncclGetLastError":   func(comm uintptr) uintptr { gotLastErrorComm = comm; return uintptr(unsafe.Pointer(&last[0])) },
	}
	d, err := bind(func(name string) (uintptr, error) {
		if cb, ok := cbs[name]; ok {
			return purego.NewCallback(cb), nil
		}
		return 1, nil // bound but never called
	})
	if err != nil {
		t.Fatal(err)
	}

	if v, r := d.getVersion(); v != 22703 || r != Success {
		t.Errorf("getVersion = %d, %v", v, r)
	}
	id, r := d.getUniqueID()
	for i := range id {
		if id[i] != byte(255-i) || r != Success {
			t.Fatalf("getUniqueID byte %d = %d, %v", i, id[i], r)
		}
	}

	for i := range id {
		id[i] = byte(i*31 + 5)
	}
	c, r := d.commInitRank(6, id, 4)
	if c != 0xabcdef || r != Success || gotN != 6 || gotRank != 4 || gotID.Internal != id {
		t.Errorf("commInitRank: comm %#x %v; callee saw n=%d rank=%d id intact=%v", c, r, gotN, gotRank, gotID.Internal == id)
	}

	r = d.reduce(0x1111, 0x2222, 1<<40, 9, 3, 5, 0x3333, 0x4444)
	want := []uintptr{0x1111, 0x2222, 1 << 40, 9, 3, 5, 0x3333, 0x4444}
	if r != InvalidUsage || len(reduceArgs) != len(want) {
		t.Fatalf("reduce = %v, callee saw %x", r, reduceArgs)
	}
	for i := range want {
		if reduceArgs[i] != want[i] {
			t.Errorf("reduce argument %d = %#x, want %#x", i, reduceArgs[i], want[i])
		}
	}

	err = check(d, "ncclReduce", r, 0x3333)
	if got, want := err.Error(), "ncclReduce: invalid usage from callback (ncclInvalidUsage): detail from callback"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if gotErrCode != int32(InvalidUsage) || gotLastErrorComm != 0x3333 {
		t.Errorf("error queries saw code %d, comm %#x", gotErrCode, gotLastErrorComm)
	}
}
