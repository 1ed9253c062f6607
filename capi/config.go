package capi

import (
	"encoding/binary"
	"math"
)

// ncclConfig_t as NCCL 2.28-2.30 lay it out (x86-64 / aarch64 LP64). Each
// release appends fields; the struct's size field and version field say
// which release the caller compiled against:
//
//	 0 size_t size          8 unsigned magic     12 unsigned version
//	16 int blocking        20 int cgaClusterSize 24 int minCTAs  28 int maxCTAs
//	32 const char* netName 40 int splitShare     44 int trafficClass
//	48 const char* commName
//	56 int collnetEnable   60 int CTAPolicy      64 int shrinkShare
//	68 int nvlsCTAs        72 int nChannelsPerNetPeer 76 int nvlinkCentricSched
//	                                             (2.28: 80 bytes)
//	80 int graphUsageMode  84 int numRmaCtx       (2.29: 88 bytes)
//	88 int maxP2pPeers     92 int graphStreamOrdering (2.30: 96 bytes)
const (
	ConfigBytes = 96         // sizeof(ncclConfig_t) in NCCL 2.30, the newest we read
	ConfigMagic = 0xcafebeef // NCCL_API_MAGIC
	UndefInt    = math.MinInt32
	Version     = 22809 // NCCL_VERSION(2,28,9): what ncclGetVersion reports (docs/NCCL-API.md says why)
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

// Kernels is ncclConfig_t's fields about how NCCL schedules its own work
// (CTAs, channels, NVLS, CUDA graphs, RMA contexts, P2P peers): parsed and
// kept, though flexlink's data planes do not use them.
type Kernels struct {
	CGAClusterSize      int32
	MinCTAs, MaxCTAs    int32
	CTAPolicy           int32
	NvlsCTAs            int32
	NChannelsPerNetPeer int32
	NvlinkCentricSched  int32
	GraphUsageMode      int32 // 2.29
	NumRmaCtx           int32 // 2.29
	MaxP2pPeers         int32 // 2.30
	GraphStreamOrdering int32 // 2.30.5
}

// DefaultConfig is every field unset (a NULL config).
func DefaultConfig() Config {
	u := int32(UndefInt)
	return Config{Blocking: u, SplitShare: u, TrafficClass: u, CollnetEnable: u, ShrinkShare: u,
		Kernels: Kernels{CGAClusterSize: u, MinCTAs: u, MaxCTAs: u, CTAPolicy: u, NvlsCTAs: u, NChannelsPerNetPeer: u, NvlinkCentricSched: u,
			GraphUsageMode: u, NumRmaCtx: u, MaxP2pPeers: u, GraphStreamOrdering: u}}
}

// IsBlocking reports whether calls on the communicator block until done
// (NCCL's default, blocking unset or non-zero).
func (c Config) IsBlocking() bool { return c.Blocking != 0 }

// configField is one field: its offset, pointer or int, and the version
// below which NCCL resets it to unset whatever the caller's bytes say
// (0: never). These are NCCL's own thresholds (parseCommConfig in
// NVIDIA/nccl src/init.cc, 2.30.7), which follow the release that
// published each field only roughly: splitShare and commName are never
// reset, trafficClass only below 2.25.
type configField struct {
	off   int
	ptr   bool
	since uint32
	set   func(*Config, uint64)
}

func i32(v uint64) int32 { return int32(uint32(v)) }

var configFields = []configField{
	{16, false, 21400, func(c *Config, v uint64) { c.Blocking = i32(v) }},
	{20, false, 21700, func(c *Config, v uint64) { c.CGAClusterSize = i32(v) }},
	{24, false, 21700, func(c *Config, v uint64) { c.MinCTAs = i32(v) }},
	{28, false, 21700, func(c *Config, v uint64) { c.MaxCTAs = i32(v) }},
	{32, true, 21700, func(c *Config, v uint64) { c.NetName = uintptr(v) }},
	{40, false, 0, func(c *Config, v uint64) { c.SplitShare = i32(v) }},
	{44, false, 22500, func(c *Config, v uint64) { c.TrafficClass = i32(v) }},
	{48, true, 0, func(c *Config, v uint64) { c.CommName = uintptr(v) }},
	{56, false, 22700, func(c *Config, v uint64) { c.CollnetEnable = i32(v) }},
	{60, false, 22700, func(c *Config, v uint64) { c.CTAPolicy = i32(v) }},
	{64, false, 22700, func(c *Config, v uint64) { c.ShrinkShare = i32(v) }},
	{68, false, 22700, func(c *Config, v uint64) { c.NvlsCTAs = i32(v) }},
	{72, false, 22800, func(c *Config, v uint64) { c.NChannelsPerNetPeer = i32(v) }},
	{76, false, 22800, func(c *Config, v uint64) { c.NvlinkCentricSched = i32(v) }},
	{80, false, 22900, func(c *Config, v uint64) { c.GraphUsageMode = i32(v) }},
	{84, false, 22900, func(c *Config, v uint64) { c.NumRmaCtx = i32(v) }},
	{88, false, 23000, func(c *Config, v uint64) { c.MaxP2pPeers = i32(v) }},
	{92, false, 23005, func(c *Config, v uint64) { c.GraphStreamOrdering = i32(v) }},
}

// ConfigSize reads the size field of a config whose first bytes are head
// (at least 8), so the caller knows how many bytes to copy: min(size,
// ConfigBytes).
func ConfigSize(head []byte) uint64 { return binary.LittleEndian.Uint64(head) }

// ParseConfig parses the bytes the C caller's ncclConfig_t holds, as NCCL
// does: raw is the first min(config->size, ConfigBytes) bytes, laid over
// an unset config of our own size (so a 2.28 caller's 80 bytes leave the
// 2.29 and 2.30 fields unset); the magic must be NCCL_API_MAGIC; a field
// newer than the caller's version is reset to unset whatever its bytes
// say. A blocking value other than 0 and 1, or a bad magic (also: a size
// too small to hold it), fail with ncclInvalidArgument.
func ParseConfig(raw []byte) (Config, error) {
	c := DefaultConfig()
	var img [ConfigBytes]byte
	n := copy(img[:], raw)
	if n >= 8 {
		n = int(min(uint64(n), binary.LittleEndian.Uint64(img[0:8])))
		clear(img[n:])
	}
	magic := binary.LittleEndian.Uint32(img[8:12])
	version := binary.LittleEndian.Uint32(img[12:16])
	if magic != ConfigMagic {
		if n < 12 {
			return c, fail(InvalidArgument, "ncclConfig_t: size %d is too small to hold the magic (was the config made with NCCL_CONFIG_INITIALIZER?)", n)
		}
		return c, fail(InvalidArgument, "ncclConfig_t: magic %#x, want %#x (initialise it with NCCL_CONFIG_INITIALIZER)", magic, uint32(ConfigMagic))
	}
	if n < configHead {
		version = 0 // no field lies within the caller's size
	}
	for _, f := range configFields {
		width := 4
		if f.ptr {
			width = 8
		}
		if f.off+width > n || version < f.since {
			continue
		}
		var v uint64
		if f.ptr {
			v = binary.LittleEndian.Uint64(img[f.off:])
		} else {
			v = uint64(binary.LittleEndian.Uint32(img[f.off:]))
		}
		f.set(&c, v)
	}
	if c.Blocking != UndefInt && c.Blocking != 0 && c.Blocking != 1 {
		return c, fail(InvalidArgument, "ncclConfig_t: blocking = %d, want 0 or 1", c.Blocking)
	}
	return c, nil
}
