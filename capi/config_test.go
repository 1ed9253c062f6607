package capi

import (
	"encoding/binary"
	"testing"
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
				Kernels: Kernels{CGAClusterSize: 2, MinCTAs: 3, MaxCTAs: 4, CTAPolicy: 2, NvlsCTAs: 7, NChannelsPerNetPeer: 8, NvlinkCentricSched: 1,
					GraphUsageMode: UndefInt, NumRmaCtx: UndefInt, MaxP2pPeers: UndefInt, GraphStreamOrdering: UndefInt}}
		}, Success},
		{"caller's struct is shorter (2.18 size)", rawConfig(48, ConfigMagic, 22809, all, ptrs), func(c *Config) {
			c.Blocking, c.CGAClusterSize, c.MinCTAs, c.MaxCTAs, c.NetName, c.SplitShare, c.TrafficClass = 0, 2, 3, 4, 0x1000, 1, 5
		}, Success},
		{"fields newer than the caller's version stay unset", rawConfig(80, ConfigMagic, 22700, all, ptrs), func(c *Config) {
			*c = Config{Blocking: 0, NetName: 0x1000, SplitShare: 1, TrafficClass: 5, CommName: 0x2000, CollnetEnable: 1, ShrinkShare: 1,
				Kernels: Kernels{CGAClusterSize: 2, MinCTAs: 3, MaxCTAs: 4, CTAPolicy: 2, NvlsCTAs: 7, NChannelsPerNetPeer: UndefInt, NvlinkCentricSched: UndefInt,
					GraphUsageMode: UndefInt, NumRmaCtx: UndefInt, MaxP2pPeers: UndefInt, GraphStreamOrdering: UndefInt}}
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

// TestConfigVersions feeds ParseConfig the ncclConfig_t of each NCCL
// release a program may be compiled against (its sizeof and its
// NCCL_VERSION_CODE, as NCCL_CONFIG_INITIALIZER sets them) with every int
// field set, and checks which fields are read: the reference is NCCL
// 2.30.7's parseCommConfig (src/init.cc), which copies min(size, its own
// size) bytes over an unset config and resets every field newer than the
// caller's version.
func TestConfigVersions(t *testing.T) {
	const set = 3 // every int field's value; pointers get 0x1000 + offset
	type fields = map[string]bool
	all := fields{"blocking": true, "cga": true, "minCTAs": true, "maxCTAs": true, "netName": true, "splitShare": true,
		"trafficClass": true, "commName": true, "collnet": true, "ctaPolicy": true, "shrinkShare": true, "nvlsCTAs": true,
		"nChannels": true, "nvlinkCentric": true, "graphUsage": true, "numRmaCtx": true, "maxP2pPeers": true, "graphOrdering": true}
	without := func(drop ...string) fields {
		f := fields{}
		for k := range all {
			f[k] = true
		}
		for _, k := range drop {
			delete(f, k)
		}
		return f
	}
	tests := []struct {
		name    string
		size    uint64
		version uint32
		read    fields // the fields that keep the caller's value
	}{
		{"2.28.9 (80 bytes)", 80, 22809, without("graphUsage", "numRmaCtx", "maxP2pPeers", "graphOrdering")},
		{"2.29.7 (88 bytes)", 88, 22907, without("maxP2pPeers", "graphOrdering")},
		{"2.30.3 (96 bytes, graphStreamOrdering not yet: its bytes are padding)", 96, 23003, without("graphOrdering")},
		{"2.30.7 (96 bytes)", 96, 23007, all},
		{"newer than 2.30 (a larger struct: its tail is ignored)", 128, 23102, all},
		{"2.27 struct (72 bytes, version 2.27.7)", 72, 22707, without("nChannels", "nvlinkCentric", "graphUsage", "numRmaCtx", "maxP2pPeers", "graphOrdering")},
		{"2.30 size with a 2.28 version: fields newer than 2.28 reset", 96, 22809, without("graphUsage", "numRmaCtx", "maxP2pPeers", "graphOrdering")},
		{"2.24 version: NCCL resets trafficClass and the 2.27 fields, keeps splitShare and commName", 96, 22403,
			without("trafficClass", "collnet", "ctaPolicy", "shrinkShare", "nvlsCTAs", "nChannels", "nvlinkCentric", "graphUsage", "numRmaCtx", "maxP2pPeers", "graphOrdering")},
		{"2.16 version: only blocking and splitShare, commName", 96, 21602,
			fields{"blocking": true, "splitShare": true, "commName": true}},
		{"size ends inside a field (2.29 struct cut at 84)", 84, 22907, without("numRmaCtx", "maxP2pPeers", "graphOrdering")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := make([]byte, max(tc.size, 16))
			binary.LittleEndian.PutUint64(raw[0:], tc.size)
			binary.LittleEndian.PutUint32(raw[8:], ConfigMagic)
			binary.LittleEndian.PutUint32(raw[12:], tc.version)
			for off := 16; off+4 <= int(tc.size); off += 4 {
				binary.LittleEndian.PutUint32(raw[off:], set)
			}
			if tc.size >= 20 {
				binary.LittleEndian.PutUint32(raw[16:], 1) // blocking: 0 or 1
			}
			for _, off := range []int{32, 48} {
				if off+8 <= int(tc.size) {
					binary.LittleEndian.PutUint64(raw[off:], uint64(0x1000+off))
				}
			}
			got, err := ParseConfig(raw[:min(tc.size, ConfigBytes)])
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			want := DefaultConfig()
			pick := func(name string, dst *int32, v int32) {
				if tc.read[name] {
					*dst = v
				}
			}
			pick("blocking", &want.Blocking, 1)
			pick("cga", &want.CGAClusterSize, set)
			pick("minCTAs", &want.MinCTAs, set)
			pick("maxCTAs", &want.MaxCTAs, set)
			pick("splitShare", &want.SplitShare, set)
			pick("trafficClass", &want.TrafficClass, set)
			pick("collnet", &want.CollnetEnable, set)
			pick("ctaPolicy", &want.CTAPolicy, set)
			pick("shrinkShare", &want.ShrinkShare, set)
			pick("nvlsCTAs", &want.NvlsCTAs, set)
			pick("nChannels", &want.NChannelsPerNetPeer, set)
			pick("nvlinkCentric", &want.NvlinkCentricSched, set)
			pick("graphUsage", &want.GraphUsageMode, set)
			pick("numRmaCtx", &want.NumRmaCtx, set)
			pick("maxP2pPeers", &want.MaxP2pPeers, set)
			pick("graphOrdering", &want.GraphStreamOrdering, set)
			if tc.read["netName"] {
				want.NetName = 0x1000 + 32
			}
			if tc.read["commName"] {
				want.CommName = 0x1000 + 48
			}
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestConfigHead covers the sizes too small for a config: NCCL copies
// min(size, sizeof) bytes over a config whose magic is 0, so anything
// that does not reach past the magic fails, and a config that holds the
// magic but no field is all defaults.
func TestConfigHead(t *testing.T) {
	tests := []struct {
		name    string
		size    uint64
		wantErr Result
	}{
		{"size 0", 0, InvalidArgument},
		{"size 8: no magic", 8, InvalidArgument},
		{"size 11: magic cut", 11, InvalidArgument},
		{"size 12: magic, no version", 12, Success},
		{"size 16: head only", 16, Success},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := make([]byte, 16)
			binary.LittleEndian.PutUint64(raw[0:], tc.size)
			binary.LittleEndian.PutUint32(raw[8:], ConfigMagic)
			binary.LittleEndian.PutUint32(raw[12:], 23007)
			got, err := ParseConfig(raw[:min(tc.size, 16)])
			if r := ResultOf(err); r != tc.wantErr {
				t.Fatalf("ParseConfig: %v (%v), want %v", r, err, tc.wantErr)
			}
			if err == nil && got != DefaultConfig() {
				t.Errorf("got %+v, want every field unset", got)
			}
		})
	}
}
