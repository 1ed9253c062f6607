package capi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"unsafe"

	"flexlink/dtype"
	"flexlink/internal/errs"
	"flexlink/internal/settings"
)

// rawConfig lays out an ncclConfig_t as a C compiler does (LP64).
func rawConfig(size uint64, magic, version uint32, ints map[int]int32, ptrs map[int]uint64) []byte {
	b := make([]byte, ConfigBytes)
	binary.LittleEndian.PutUint64(b[0:], size)
	binary.LittleEndian.PutUint32(b[8:], magic)
	binary.LittleEndian.PutUint32(b[12:], version)
	for _, f := range configFields {
		if !f.ptr {
			u := int32(UndefInt)
			binary.LittleEndian.PutUint32(b[f.off:], uint32(u))
		}
	}
	for off, v := range ints {
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
	}
	for off, v := range ptrs {
		binary.LittleEndian.PutUint64(b[off:], v)
	}
	return b[:min(size, ConfigBytes)]
}

func TestParseConfig(t *testing.T) {
	all := map[int]int32{16: 0, 20: 2, 24: 3, 28: 4, 40: 1, 44: 5, 56: 1, 60: 2, 64: 1, 68: 7, 72: 8, 76: 1}
	ptrs := map[int]uint64{32: 0x1000, 48: 0x2000}
	tests := []struct {
		name    string
		raw     []byte
		want    func(c *Config)
		wantErr Result
	}{
		{"full 2.28", rawConfig(80, ConfigMagic, 22809, all, ptrs), func(c *Config) {
			*c = Config{Blocking: 0, NetName: 0x1000, SplitShare: 1, TrafficClass: 5, CommName: 0x2000, CollnetEnable: 1, ShrinkShare: 1,
				Kernels: Kernels{CGAClusterSize: 2, MinCTAs: 3, MaxCTAs: 4, CTAPolicy: 2, NvlsCTAs: 7, NChannelsPerNetPeer: 8, NvlinkCentricSched: 1}}
		}, Success},
		{"caller's struct is shorter (2.18 size)", rawConfig(48, ConfigMagic, 22809, all, ptrs), func(c *Config) {
			c.Blocking, c.CGAClusterSize, c.MinCTAs, c.MaxCTAs, c.NetName, c.SplitShare, c.TrafficClass = 0, 2, 3, 4, 0x1000, 1, 5
		}, Success},
		{"fields newer than the caller's version stay unset", rawConfig(80, ConfigMagic, 22700, all, ptrs), func(c *Config) {
			*c = Config{Blocking: 0, NetName: 0x1000, SplitShare: 1, TrafficClass: 5, CommName: 0x2000, CollnetEnable: 1, ShrinkShare: 1,
				Kernels: Kernels{CGAClusterSize: 2, MinCTAs: 3, MaxCTAs: 4, CTAPolicy: 2, NvlsCTAs: 7, NChannelsPerNetPeer: UndefInt, NvlinkCentricSched: UndefInt}}
		}, Success},
		{"initializer defaults", rawConfig(80, ConfigMagic, 22809, nil, nil), func(c *Config) {}, Success},
		{"bad magic", rawConfig(80, 0x1234, 22809, nil, nil), nil, InvalidArgument},
		{"too short", rawConfig(8, ConfigMagic, 22809, nil, nil), nil, InvalidArgument},
		{"blocking 2", rawConfig(80, ConfigMagic, 22809, map[int]int32{16: 2}, nil), nil, InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig(tc.raw)
			if r := ResultOf(err); r != tc.wantErr {
				t.Fatalf("ParseConfig: %v (%v), want %v", r, err, tc.wantErr)
			}
			if tc.want == nil {
				return
			}
			want := DefaultConfig()
			tc.want(&want)
			if got != want {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
	if !DefaultConfig().IsBlocking() {
		t.Error("an unset blocking field must mean blocking")
	}
}

func TestDataTypeAndOps(t *testing.T) {
	want := map[int32]dtype.DType{0: dtype.Int8, 1: dtype.Uint8, 2: dtype.Int32, 4: dtype.Int64, 6: dtype.Float16, 7: dtype.Float32, 8: dtype.Float64, 9: dtype.BFloat16}
	for code := int32(-1); code < 14; code++ {
		got, err := DataType(code)
		if w, ok := want[code]; ok {
			if err != nil || got != w {
				t.Errorf("DataType(%d) = %v, %v; want %v", code, got, err, w)
			}
		} else if ResultOf(err) != InvalidArgument {
			t.Errorf("DataType(%d): %v, want ncclInvalidArgument", code, err)
		}
	}
	ops := map[int32]dtype.Op{0: dtype.Sum, 1: dtype.Prod, 2: dtype.Max, 3: dtype.Min, 4: dtype.Avg}
	for code := int32(-1); code < 7; code++ {
		got, ok := builtinOp(code)
		if w, known := ops[code]; ok != known || (known && got != w) {
			t.Errorf("builtinOp(%d) = %v, %v", code, got, ok)
		}
	}
}

func TestUniqueID(t *testing.T) {
	info, err := newIDInfo(netip.MustParseAddrPort("10.1.2.3:29500"))
	if err != nil {
		t.Fatal(err)
	}
	id := info.encode()
	got, err := decodeID(id)
	if err != nil || got.Addr != info.Addr || string(got.Secret) != string(info.Secret) || got.Nonce != info.Nonce {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, info)
	}
	other, _ := newIDInfo(info.Addr)
	if other.JobID() == info.JobID() || string(other.Secret) == string(info.Secret) {
		t.Error("two ids share a job id or secret")
	}
	for name, mutate := range map[string]func(*UniqueID){
		"zeroes":    func(u *UniqueID) { *u = UniqueID{} },
		"version":   func(u *UniqueID) { u[4] = 9 },
		"corrupted": func(u *UniqueID) { u[30] ^= 1 },
	} {
		u := id
		mutate(&u)
		if _, err := decodeID(u); ResultOf(err) != InvalidArgument {
			t.Errorf("%s: %v, want ncclInvalidArgument", name, err)
		}
	}
}

func TestResultOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Result
	}{
		{nil, Success},
		{fmt.Errorf("x: %w", errs.ErrMismatch), InvalidUsage},
		{fmt.Errorf("x: %w", errs.ErrPeerLost), RemoteError},
		{fmt.Errorf("x: %w", errs.ErrAborted), RemoteError},
		{fmt.Errorf("x: %w", errs.ErrNotSupported), InvalidArgument},
		{fail(InvalidUsage, "y"), InvalidUsage},
		{errors.New("other"), SystemError},
	} {
		if got := ResultOf(tc.err); got != tc.want {
			t.Errorf("ResultOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if ErrorString(InProgress) == "" || ErrorString(99) == "" || Result(99).String() != "ncclResult(99)" {
		t.Error("error strings")
	}
}

// TestGroupInitsOneThread is nccl-tests -g 2: one thread creates both ranks
// of a communicator inside a group, then runs an allreduce on both in one
// group, on host buffers.
func TestGroupInitsOneThread(t *testing.T) {
	l := New(Options{Env: settings.Map(map[string]string{"FLEXLINK_BOOTSTRAP_TIMEOUT": "20s"})})
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	const tid = 1
	l.GroupStart(tid)
	var hs [2]uintptr
	for r := range 2 {
		if hs[r], err = l.InitRank(tid, 2, id, r, DefaultConfig()); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.GroupEnd(tid); err != nil {
		t.Fatal(err)
	}
	bufs := [2][]float32{{1, 2, 3}, {10, 20, 30}}
	l.GroupStart(tid)
	for r := range 2 {
		p := unsafe.Pointer(&bufs[r][0])
		if err := l.Coll(tid, hs[r], Call{Kind: AllReduce, Send: p, Recv: p, Count: 3, Type: ncclFloat32, Op: 0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.GroupEnd(tid); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if fmt.Sprint(bufs[r]) != "[11 22 33]" {
			t.Errorf("rank %d: %v, want [11 22 33]", r, bufs[r])
		}
	}
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.Destroy(h) }()
	}
	wg.Wait()
	if _, err := l.AsyncError(hs[0]); ResultOf(err) != InvalidArgument {
		t.Errorf("a destroyed handle: %v, want ncclInvalidArgument", err)
	}
}
