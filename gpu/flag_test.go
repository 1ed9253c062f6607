package gpu_test

import (
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

func TestFlagCtlRoundTrip(t *testing.T) {
	for _, c := range []gpu.FlagCtl{
		{},
		{Region: [gpu.FlagMaxRanks]uint64{0x7f0000000000, 0x7f0010000000}, ErrHost: 0x7e00, TimeoutNs: 30e9,
			Layout: gpu.FlagLayout{SlotBytes: 262144, Depth: 2, MaxBlocks: 128}, Ranks: 2, Me: 1, LLBlocks: 8},
		{Region: [gpu.FlagMaxRanks]uint64{1, 2, 3, 4, 5, 6, 7, 8}, Layout: gpu.FlagLayout{SlotBytes: 256, Depth: 9, MaxBlocks: 1}, Ranks: 8, Me: 7},
	} {
		b := c.Bytes()
		if len(b) != gpu.FlagCtlBytes || gpu.FlagCtlBytes > gpu.FlagReadyOffset {
			t.Fatalf("control block of %d bytes (ready counters at %d)", len(b), gpu.FlagReadyOffset)
		}
		if got := gpu.ParseFlagCtl(b); got != c {
			t.Errorf("%+v decodes as %+v", c, got)
		}
	}
}

func TestDecodeFlagError(t *testing.T) {
	for _, tc := range []struct {
		w    uint64
		want gpu.FlagError
		ok   bool
	}{
		{0, gpu.FlagError{}, false},
		{1<<63 | 2<<40 | 17<<16 | 1, gpu.FlagError{Peer: 1, Block: 17, What: 2}, true},
		{1<<63 | 3<<40 | 127<<16 | 7, gpu.FlagError{Peer: 7, Block: 127, What: 3}, true},
		{1<<63 | 1<<40, gpu.FlagError{What: 1}, true},
	} {
		got, ok := gpu.DecodeFlagError(tc.w)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%#x: %+v %v, want %+v %v", tc.w, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFlagLayout(t *testing.T) {
	for _, tc := range []struct {
		l     gpu.FlagLayout
		ok    bool
		bytes int // for 2 ranks
	}{
		// the slots, then the line slots: 128 line blocks with 2 ranks (at
		// most the layout's blocks), two of 2*8 KiB + 256 each
		{gpu.FlagLayout{SlotBytes: 262144, Depth: 2, MaxBlocks: 128}, true, 65536 + 128*2*262144 + 128*2*(16384+256)},
		{gpu.FlagLayout{SlotBytes: 512, Depth: 2, MaxBlocks: 1}, true, 65536 + 2*512 + 1*2*(16384+256)},
		{gpu.FlagLayout{SlotBytes: 256, Depth: 2, MaxBlocks: 1}, false, 0}, // no room beside the header
		{gpu.FlagLayout{SlotBytes: 300, Depth: 2, MaxBlocks: 1}, false, 0},
		{gpu.FlagLayout{SlotBytes: 0, Depth: 2, MaxBlocks: 1}, false, 0},
		{gpu.FlagLayout{SlotBytes: 512, Depth: 1, MaxBlocks: 1}, false, 0},
		{gpu.FlagLayout{SlotBytes: 512, Depth: 2, MaxBlocks: gpu.FlagMaxBlocks + 1}, false, 0},
		{gpu.FlagLayout{SlotBytes: 512, Depth: 2, MaxBlocks: 0}, false, 0},
	} {
		err := tc.l.Check()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: Check() = %v, want ok=%v", tc.l, err, tc.ok)
		}
		if tc.ok && tc.l.RegionBytes(2) != tc.bytes {
			t.Errorf("%+v: RegionBytes(2) = %d, want %d", tc.l, tc.l.RegionBytes(2), tc.bytes)
		}
	}
}

// TestFlagLLBlocks: the line slots' blocks per region, alike on every
// rank: 128 blocks' worth over the peers, at least 2, at most the layout's.
func TestFlagLLBlocks(t *testing.T) {
	for _, tc := range []struct{ blocks, n, want int }{
		{128, 1, 0}, {128, 2, 128}, {128, 3, 64}, {128, 4, 42}, {128, 8, 18}, {128, 80, 2}, {1, 2, 1}, {4, 2, 4}, {32, 2, 32}, {160, 2, 128},
	} {
		l := gpu.FlagLayout{SlotBytes: 512, Depth: 2, MaxBlocks: tc.blocks}
		if got := l.LLBlocks(tc.n); got != tc.want {
			t.Errorf("blocks %d, %d ranks: LLBlocks = %d, want %d", tc.blocks, tc.n, got, tc.want)
		}
	}
}

func TestFlagNames(t *testing.T) {
	if got := gpu.FlagKernelName(dtype.Float32, dtype.Avg); got != "flexlink_flag_sum_f32" {
		t.Errorf("avg on float32: %s", got)
	}
	if got := gpu.FlagKernelName(dtype.BFloat16, dtype.Max); got != "flexlink_flag_max_bf16" {
		t.Errorf("max on bfloat16: %s", got)
	}
	if gpu.FlagSignature(gpu.FlagAllReduceKind, 100, dtype.Float32, dtype.Sum) == gpu.FlagSignature(gpu.FlagAllReduceKind, 101, dtype.Float32, dtype.Sum) ||
		gpu.FlagSignature(gpu.FlagAllReduceKind, 100, dtype.Float32, dtype.Sum) == gpu.FlagSignature(gpu.FlagAllReduceKind, 100, dtype.Float32, dtype.Max) ||
		gpu.FlagSignature(gpu.FlagAllGatherKind, 100, dtype.Uint8, dtype.Sum) == gpu.FlagSignature(gpu.FlagAllToAllKind, 100, dtype.Uint8, dtype.Sum) ||
		gpu.FlagSignature(gpu.FlagAllReduceKind, 100, dtype.Float32, dtype.Sum) == gpu.FlagSignature(gpu.FlagAllReduceKind, 100, dtype.Int32, dtype.Sum) {
		t.Error("signatures of different calls agree")
	}
}
