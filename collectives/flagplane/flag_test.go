package flagplane

import (
	"testing"

	"github.com/flexlink/flexlink/gpu"
)

// TestFlagShape: every call's grid and chunk fit the region's layout, no
// block idles while another takes a second chunk, and chunks are whole
// multiples of 256 bytes that fit a slot. The calls' kernels are tested
// through the direct plane (collectives/direct: flag_test.go,
// flag_pcie_test.go, capture_test.go).
func TestFlagShape(t *testing.T) {
	for _, l := range []gpu.FlagLayout{
		{SlotBytes: 262144, Depth: 2, MaxBlocks: 128},
		{SlotBytes: 32768, Depth: 2, MaxBlocks: 128}, // the small region's slots at 4 ranks
		{SlotBytes: 16384, Depth: 2, MaxBlocks: 128}, // and at 8
		{SlotBytes: 43520, Depth: 2, MaxBlocks: 3},
		{SlotBytes: 512, Depth: 2, MaxBlocks: 1},
	} {
		for _, bytes := range []int{1, 255, 256, 4 << 10, 8 << 10, 20 << 10, 64 << 10, 128 << 10, 1 << 20, 1<<20 + 24, 64 << 20, 1 << 30} {
			for _, sz := range []int{1, 2, 4, 8} {
				for _, ll := range []int{0, l.LLBlocks(2), l.LLBlocks(8)} {
					if bytes%sz != 0 {
						continue
					}
					grid, chunk := shape(l, bytes, sz, ll)
					if ll > 0 && bytes <= ll*gpu.FlagLLPay && l.SlotBytes-gpu.FlagSlotHeader >= gpu.FlagLLPay {
						// A line call: at most ll blocks, one chunk each, at
						// most a line slot's payload (the kernels' test).
						if grid > ll || grid > l.MaxBlocks || chunk*sz > gpu.FlagLLPay || (bytes/sz+chunk-1)/chunk > grid {
							t.Errorf("%+v, %d bytes of %d, %d line blocks: grid %d, chunk %d bytes: not a line call", l, bytes, sz, ll, grid, chunk*sz)
						}
					}
					cb := chunk * sz
					if grid < 1 || grid > l.MaxBlocks || cb <= 0 || cb%256 != 0 || cb > l.SlotBytes-gpu.FlagSlotHeader {
						t.Errorf("%+v, %d bytes of %d: grid %d, chunk %d bytes", l, bytes, sz, grid, cb)
					}
					chunks := (bytes/sz + chunk - 1) / chunk
					if chunks < grid && bytes >= grid*256 {
						t.Errorf("%+v, %d bytes: %d chunks for %d blocks (idle blocks)", l, bytes, chunks, grid)
					}
					// No block takes a second chunk while another block could
					// have taken it: blocks are capped only by MaxBlocks.
					if chunks > grid && grid < l.MaxBlocks {
						t.Errorf("%+v, %d bytes of %d: %d chunks over %d of %d blocks (a second step for some)", l, bytes, sz, chunks, grid, l.MaxBlocks)
					}
				}
			}
		}
	}
}

// TestLineCallBlocks: a two-rank line call takes one block per 2 KiB
// (flagLLChunk), up to the line blocks: the grid measured on 2xH200.
func TestLineCallBlocks(t *testing.T) {
	l := gpu.FlagLayout{SlotBytes: 262144, Depth: 2, MaxBlocks: 128}
	ll := l.LLBlocks(2)
	for _, tc := range []struct{ bytes, grid, chunk int }{
		{8, 1, 256}, {2 << 10, 1, 2 << 10}, {2<<10 + 4, 2, 1280}, {4 << 10, 2, 2 << 10},
		{64 << 10, 32, 2 << 10}, {128 << 10, 64, 2 << 10}, {256 << 10, 128, 2 << 10}, {1 << 20, 128, 8 << 10},
	} {
		grid, chunk := shape(l, tc.bytes, 4, ll)
		if grid != tc.grid || chunk*4 != tc.chunk {
			t.Errorf("%d bytes: grid %d, chunk %d bytes; want %d, %d", tc.bytes, grid, chunk*4, tc.grid, tc.chunk)
		}
	}
}
