package capi

import (
	"encoding/binary"
	"math"
)

// ncclConfig_t as NCCL 2.28 lays it out (x86-64 / aarch64 LP64):
//
//	 0 size_t size          8 unsigned magic     12 unsigned version
//	16 int blocking        20 int cgaClusterSize 24 int minCTAs  28 int maxCTAs
//	32 const char* netName 40 int splitShare     44 int trafficClass
//	48 const char* commName
//	56 int collnetEnable   60 int CTAPolicy      64 int shrinkShare
//	68 int nvlsCTAs        72 int nChannelsPerNetPeer 76 int nvlinkCentricSched
const (
	ConfigBytes = 80         // sizeof(ncclConfig_t) in NCCL 2.28
	ConfigMagic = 0xcafebeef // NCCL_API_MAGIC
	UndefInt    = math.MinInt32
	Version     = 22809 // NCCL_VERSION(2,28,9): what ncclGetVersion reports
	configHead  = 16    // size, magic, version
)

// Config is a parsed ncclConfig_t. Int fields NCCL leaves unset
// (NCCL_CONFIG_UNDEF_INT) are UndefInt; pointer fields are the caller's
// addresses (0: unset), for the C side to read.
type Config struct {
	Blocking      int32
	NetName       uintptr
	SplitShare    int32
	TrafficClass  int32
	CommName      uintptr
	CollnetEnable int32
	ShrinkShare   int32
	Kernels
}

// Kernels is ncclConfig_t's fields about NCCL's kernels (CTAs, channels,
// NVLS and scheduling): parsed and kept, though flexlink's data planes do
// not use them.
type Kernels struct {
	CGAClusterSize      int32
	MinCTAs, MaxCTAs    int32
	CTAPolicy           int32
	NvlsCTAs            int32
	NChannelsPerNetPeer int32
	NvlinkCentricSched  int32
}

// DefaultConfig is every field unset (a NULL config).
func DefaultConfig() Config {
	u := int32(UndefInt)
	return Config{Blocking: u, SplitShare: u, TrafficClass: u, CollnetEnable: u, ShrinkShare: u,
		Kernels: Kernels{CGAClusterSize: u, MinCTAs: u, MaxCTAs: u, CTAPolicy: u, NvlsCTAs: u, NChannelsPerNetPeer: u, NvlinkCentricSched: u}}
}

// IsBlocking reports whether calls on the communicator block until done
// (NCCL's default, blocking unset or non-zero).
func (c Config) IsBlocking() bool { return c.Blocking != 0 }

// configField is one field: its offset, pointer or int, and the NCCL
// version that added it (a caller whose version predates it gets it unset,
// whatever its bytes say).
type configField struct {
	off   int
	ptr   bool
	since uint32
	set   func(*Config, uint64)
}

func i32(v uint64) int32 { return int32(uint32(v)) }

var configFields = []configField{
	{16, false, 21400, func(c *Config, v uint64) { c.Blocking = i32(v) }},
	{20, false, 21400, func(c *Config, v uint64) { c.CGAClusterSize = i32(v) }},
	{24, false, 21400, func(c *Config, v uint64) { c.MinCTAs = i32(v) }},
	{28, false, 21400, func(c *Config, v uint64) { c.MaxCTAs = i32(v) }},
	{32, true, 21400, func(c *Config, v uint64) { c.NetName = uintptr(v) }},
	{40, false, 21800, func(c *Config, v uint64) { c.SplitShare = i32(v) }},
	{44, false, 22200, func(c *Config, v uint64) { c.TrafficClass = i32(v) }},
	{48, true, 22200, func(c *Config, v uint64) { c.CommName = uintptr(v) }},
	{56, false, 22200, func(c *Config, v uint64) { c.CollnetEnable = i32(v) }},
	{60, false, 22200, func(c *Config, v uint64) { c.CTAPolicy = i32(v) }},
	{64, false, 22700, func(c *Config, v uint64) { c.ShrinkShare = i32(v) }},
	{68, false, 22700, func(c *Config, v uint64) { c.NvlsCTAs = i32(v) }},
	{72, false, 22800, func(c *Config, v uint64) { c.NChannelsPerNetPeer = i32(v) }},
	{76, false, 22800, func(c *Config, v uint64) { c.NvlinkCentricSched = i32(v) }},
}

// ConfigSize reads the size field of a config whose first bytes are head
// (at least 8), so the caller knows how many bytes to copy: min(size,
// ConfigBytes).
func ConfigSize(head []byte) uint64 { return binary.LittleEndian.Uint64(head) }

// ParseConfig parses the bytes the C caller's ncclConfig_t holds, as NCCL
// does: raw is the first min(config->size, ConfigBytes) bytes; the magic
// must be NCCL_API_MAGIC; fields past the caller's size, or newer than the
// caller's version, stay unset. A blocking value other than 0 and 1 or a
// bad magic or size fail with ncclInvalidArgument.
func ParseConfig(raw []byte) (Config, error) {
	c := DefaultConfig()
	if len(raw) < configHead {
		return c, fail(InvalidArgument, "ncclConfig_t: size %d is too small (want at least %d; was the config made with NCCL_CONFIG_INITIALIZER?)", len(raw), configHead)
	}
	size := binary.LittleEndian.Uint64(raw[0:8])
	magic := binary.LittleEndian.Uint32(raw[8:12])
	version := binary.LittleEndian.Uint32(raw[12:16])
	if magic != ConfigMagic {
		return c, fail(InvalidArgument, "ncclConfig_t: magic %#x, want %#x (initialise it with NCCL_CONFIG_INITIALIZER)", magic, uint32(ConfigMagic))
	}
	if size < configHead {
		return c, fail(InvalidArgument, "ncclConfig_t: size field %d is too small", size)
	}
	n := min(uint64(len(raw)), size, ConfigBytes)
	for _, f := range configFields {
		width := 4
		if f.ptr {
			width = 8
		}
		if uint64(f.off+width) > n || version < f.since {
			continue
		}
		var v uint64
		if f.ptr {
			v = binary.LittleEndian.Uint64(raw[f.off:])
		} else {
			v = uint64(binary.LittleEndian.Uint32(raw[f.off:]))
		}
		f.set(&c, v)
	}
	if c.Blocking != UndefInt && c.Blocking != 0 && c.Blocking != 1 {
		return c, fail(InvalidArgument, "ncclConfig_t: blocking = %d, want 0 or 1", c.Blocking)
	}
	return c, nil
}
